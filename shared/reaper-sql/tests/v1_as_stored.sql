CREATE TABLE reaper_schema (
    version     INTEGER PRIMARY KEY NOT NULL,
    description TEXT NOT NULL
);

CREATE TABLE runs (
    run_id           TEXT PRIMARY KEY NOT NULL,
    thread_id        TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'interrupted', 'completed', 'failed', 'aborted')),
    started_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    error_message    TEXT,
    error_code       TEXT,
    usage            TEXT CHECK (usage IS NULL OR json_valid(usage)),
    sandbox_key      TEXT,
    detached_since   INTEGER,
    cancel_requested INTEGER CHECK (cancel_requested IS NULL OR cancel_requested IN (0, 1)),
    driver_epoch     INTEGER CHECK (driver_epoch IS NULL OR driver_epoch >= 0),
    CHECK (error_code IS NULL OR error_message IS NOT NULL)
);

CREATE INDEX runs_by_thread ON runs (thread_id, started_at);

CREATE INDEX runs_reclaimable ON runs (detached_since)
    WHERE status = 'running' AND detached_since IS NOT NULL;

CREATE INDEX runs_finished ON runs (finished_at)
    WHERE finished_at IS NOT NULL AND status IN ('completed', 'failed', 'aborted');

CREATE TABLE leases (
    key        TEXT PRIMARY KEY NOT NULL,
    owner      TEXT NOT NULL,
    token      TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TABLE logs (
    run_id           TEXT PRIMARY KEY NOT NULL,
    closed           INTEGER NOT NULL DEFAULT 0 CHECK (closed IN (0, 1)),
    last_append_at   INTEGER,
    next_seq         INTEGER NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    events_pruned_at INTEGER
);

CREATE TABLE log_entries (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL CHECK (seq >= 0),
    chunk  TEXT NOT NULL CHECK (json_valid(chunk)),
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE sandbox_instances (
    key                 TEXT PRIMARY KEY NOT NULL,
    provider            TEXT NOT NULL,
    provider_sandbox_id TEXT NOT NULL,
    latest_snapshot_id  TEXT,
    thread_id           TEXT NOT NULL,
    latest_run_id       TEXT,
    updated_at          INTEGER NOT NULL
);

CREATE TABLE transcripts (
    run_id    TEXT PRIMARY KEY NOT NULL,
    thread_id TEXT NOT NULL,
    body      TEXT NOT NULL CHECK (json_valid(body)),
    exit_code INTEGER,
    saved_at  INTEGER NOT NULL
);

CREATE INDEX transcripts_by_thread ON transcripts (thread_id, saved_at);
