-- Migration 0005: the events table in commit order, its rowid the global order.
--
-- Until 0004 events were a WITHOUT ROWID table ordered by (run_id, seq): run ids are random,
-- so each commit wrote its rows into the middle of that B-tree (a random leaf, often split)
-- and numbered them through a second index, events_by_gseq. Now gseq is the rowid (INTEGER
-- PRIMARY KEY): a commit appends its rows at the end of the table, the global order needs no
-- index of its own, and (run_id, seq) stays unique through events_by_run, an index of small
-- entries. Fewer pages are written per commit.
--
-- Every row keeps its gseq. An insert that gives none gets max(gseq) + 1 (SQLite's rowid
-- without AUTOINCREMENT), the number 0004's insert computed itself: given in commit order,
-- since the write lock serialises every process's transactions. Events are never deleted.

ALTER TABLE events RENAME TO events_0004;

CREATE TABLE events (
    run_id  TEXT NOT NULL REFERENCES runs (run_id),
    seq     INTEGER NOT NULL CHECK (seq >= 1),
    type    TEXT NOT NULL,
    at      TEXT NOT NULL,
    payload TEXT NOT NULL,
    gseq    INTEGER PRIMARY KEY  -- the global order (0004), the rowid since 0005
);

INSERT INTO events (run_id, seq, type, at, payload, gseq)
SELECT run_id, seq, type, at, payload, gseq FROM events_0004 ORDER BY gseq;

DROP TABLE events_0004;

CREATE UNIQUE INDEX events_by_run ON events (run_id, seq);
