-- schema.sql -- the ddpdbg trace format, version 2 (PRAGMA user_version). One SQLite database
-- per rank, rank<R>.db, written by that rank's probe (probe/probe.c) and, for a rank that
-- died, completed by the launcher's drain of its ring. Compiled into the probe from this very
-- file (probe/embed_schema.sh), so this text is the only definition. traces/README.md
-- documents every kind and column. Times are integer ns of CLOCK_REALTIME (one clock for all
-- ranks of a host). A new column or table is additive and keeps version 1 readable; renaming
-- or retyping anything, or changing what a row means, raises user_version, and readers refuse
-- versions newer than theirs. Version 2: a hook that marks its parameter ready at once is one
-- GRAD_READY row with flag 2 and the bucket in d (version 1 had a MARK_READY row after it);
-- view marks lists every mark either way.
PRAGMA user_version = 2;

-- Run and rank metadata: what the probe knows at open (rank, pid, host, ring, ring_capacity,
-- created_ns), what the trainer reports in META records (world, args, revision, ...), and
-- the probe's own accounting (overruns, stored, closed; drain_* after a drain).
CREATE TABLE meta(
    key   TEXT PRIMARY KEY,
    value TEXT
);

-- Names of the event kinds: the values of enum ProbeKind in probe/probe.h, fixed forever.
CREATE TABLE kinds(
    kind INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
INSERT INTO kinds(kind, name) VALUES
    (1, 'META'), (2, 'PARAM'), (3, 'LAYOUT'),
    (4, 'FORWARD_BEGIN'), (5, 'FORWARD_END'), (6, 'BACKWARD_BEGIN'), (7, 'BACKWARD_END'),
    (8, 'GRAD_READY'), (9, 'MARK_READY'), (10, 'BUCKET_READY'),
    (11, 'COLL_LAUNCH'), (12, 'COLL_DONE'), (13, 'FINALIZE'), (14, 'OPTIM_STEP'),
    (15, 'BATCH'), (16, 'ERROR'), (17, 'HEARTBEAT'), (18, 'HANG'), (19, 'TEXT'),
    (20, 'GPU_KERNEL'), (21, 'GPU_MEMCPY'), (22, 'GPU_MEMSET'), (23, 'GPU_CORRELATION');

-- Collective op codes (COLL_LAUNCH and COLL_DONE, column a): enum ProbeOp.
CREATE TABLE ops(
    op   INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
INSERT INTO ops(op, name) VALUES (1, 'allreduce'), (2, 'broadcast'), (3, 'allgather'), (4, 'barrier');

-- Phase codes (HEARTBEAT, column a): enum ProbePhase.
CREATE TABLE phases(
    phase INTEGER PRIMARY KEY,
    name  TEXT NOT NULL UNIQUE
);
INSERT INTO phases(phase, name) VALUES
    (0, 'idle'), (1, 'startup'), (2, 'data'), (3, 'forward'), (4, 'backward'),
    (5, 'collective'), (6, 'optim'), (7, 'validate'), (8, 'checkpoint'), (9, 'done');

-- The parameter table, from PARAM records: index in definition order, PyTorch's name, shape
-- as "d0xd1x..." ("" for a scalar).
CREATE TABLE params(
    idx   INTEGER PRIMARY KEY,
    name  TEXT NOT NULL,
    ndim  INTEGER NOT NULL,
    shape TEXT NOT NULL,
    numel INTEGER NOT NULL
);

-- Bucket layouts, from LAYOUT records: generation 0 is the initial layout, 1.. each rebuild.
-- pos is the parameter's position in its bucket (the order its LAYOUT records came), offset
-- its first element in the bucket's flat buffer.
CREATE TABLE layouts(
    generation INTEGER NOT NULL,
    bucket     INTEGER NOT NULL,
    pos        INTEGER NOT NULL,
    param      INTEGER NOT NULL,
    offset     INTEGER NOT NULL,
    PRIMARY KEY (generation, bucket, pos),
    UNIQUE (generation, param)
);

-- Every record of the rank, in the order it was produced: seq is the per-rank record number
-- (1-based). Long text is reassembled from its TEXT continuation records, which get no row of
-- their own (so seq has gaps where they were). kind names: table kinds. flags bit 0: ok
-- (COLL_DONE); bit 1: marked (GRAD_READY: the hook marked its parameter ready in bucket d).
CREATE TABLE events(
    seq   INTEGER PRIMARY KEY,
    t_ns  INTEGER NOT NULL,
    iter  INTEGER NOT NULL,
    kind  INTEGER NOT NULL REFERENCES kinds(kind),
    a     INTEGER NOT NULL,
    b     INTEGER NOT NULL,
    c     INTEGER NOT NULL,
    d     INTEGER NOT NULL,
    flags INTEGER NOT NULL,
    text  TEXT
);
-- No index besides seq: its upkeep would be a quarter of the writer's cost per row. ddpdbg's
-- readers find an iteration's rows by seq range; an ad-hoc query by iteration scans the table
-- (or SQLite builds an automatic index for a join).

-- events with the kind's name, for the sqlite3 command line.
CREATE VIEW named_events AS
    SELECT e.seq, e.t_ns, e.iter, k.name AS kind, e.a, e.b, e.c, e.d, e.flags, e.text
    FROM events e JOIN kinds k USING (kind);

-- Every mark of a parameter ready in its bucket: GRAD_READY rows whose hook marked it (flag 2),
-- and MARK_READY rows (find_unused_parameters' unused ones, and the first hook's own mark
-- that follows them).
-- A parameter with no row here for an iteration never reported to the reducer in it.
CREATE VIEW marks AS
    SELECT seq, t_ns, iter, a AS param, d AS bucket, 0 AS unused
    FROM events WHERE kind = 8 AND flags & 2
    UNION ALL
    SELECT seq, t_ns, iter, a, b, c FROM events WHERE kind = 9;
