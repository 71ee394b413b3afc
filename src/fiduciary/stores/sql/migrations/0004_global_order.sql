-- Migration 0004: the global order of events (GlobalEvents.read_global, GET /events).
--
-- events.gseq numbers every event across runs in commit order. An insert takes the next
-- number in its own statement (one probe of events_by_gseq, see insert_event in sqlite.sql):
-- SQLite's write lock serialises the transactions of every process on the file, so numbers
-- are given in commit order and a reader never sees a lower one appear behind a higher one.
-- Events written before this migration are numbered in the order of their times, each run's
-- in seq order (a run's time never goes back in this numbering).

ALTER TABLE events ADD COLUMN gseq INTEGER;

CREATE TEMP TABLE global_order (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
);

INSERT INTO global_order (run_id, seq)
SELECT run_id, seq FROM (
    SELECT run_id, seq, MAX(at) OVER (PARTITION BY run_id ORDER BY seq) AS reached
    FROM events
) ORDER BY reached, run_id, seq;

UPDATE events SET gseq = (
    SELECT o.rowid FROM global_order AS o WHERE o.run_id = events.run_id AND o.seq = events.seq
);

DROP TABLE global_order;

CREATE UNIQUE INDEX events_by_gseq ON events (gseq);
