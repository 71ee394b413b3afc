-- Migration 0004: the global order of events (GlobalEvents.read_global, GET /events).
--
-- Transactions of many processes commit in parallel, so a number drawn from a sequence does
-- not say when its row becomes visible: a reader that went past number 10 could later see a
-- number 5 commit. Each event therefore records its transaction id too (xid, by default the
-- inserting transaction's: the writer's statements are unchanged), the global order is
-- (xid, gseq), and a reader reads only rows whose transaction is older than every
-- transaction still in progress (xid < pg_snapshot_xmin(pg_current_snapshot())): nothing can
-- commit before such a row any more (the transactional outbox's rule). A run's events stay
-- in seq order: one lease holder writes them, one transaction after the other.
-- Events written before this migration keep the order of their times, each run's in seq order.

ALTER TABLE events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();

ALTER TABLE events ADD COLUMN gseq bigint;

UPDATE events AS e SET gseq = o.n
FROM (
    SELECT run_id, seq, row_number() OVER (ORDER BY reached, run_id, seq) AS n
    FROM (
        SELECT run_id, seq, max(at) OVER (PARTITION BY run_id ORDER BY seq) AS reached
        FROM events
    ) AS t
) AS o
WHERE e.run_id = o.run_id AND e.seq = o.seq;

ALTER TABLE events ALTER COLUMN gseq SET NOT NULL;

ALTER TABLE events ALTER COLUMN gseq ADD GENERATED ALWAYS AS IDENTITY;

SELECT setval(pg_get_serial_sequence('events', 'gseq'), max(gseq)) FROM events
WHERE gseq IS NOT NULL HAVING count(*) > 0;

CREATE UNIQUE INDEX events_by_gseq ON events (gseq);

CREATE INDEX events_global ON events (xid, gseq);
