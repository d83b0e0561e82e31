-- Leasehold schema, version 8: object metadata and status beside the value.
--
-- Every column has a default (or is nullable), so existing rows stay valid
-- and mean what they meant: no labels, no owner, no finalizers, never
-- marked for deletion, no status, generation 1. Adding a column with a
-- constant default rewrites nothing in PostgreSQL 11 and later.
--
-- `labels`: a JSON object of string values (checked by the store, not
-- here). `owner_kind`/`owner_name`: the owning object of the same
-- cluster, both or neither. `finalizers`: what must be done before the
-- object is removed; while any remain, a delete only sets
-- `deleting_since`. `status`: JSON text written only by status writes.
-- `generation`: grows with each change of the value or the metadata, never
-- with a status write.
ALTER TABLE leasehold_objects
    ADD COLUMN labels         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN owner_kind     text COLLATE "C",
    ADD COLUMN owner_name     text COLLATE "C",
    ADD COLUMN finalizers     text[]      NOT NULL DEFAULT '{}'::text[],
    ADD COLUMN deleting_since timestamptz,
    ADD COLUMN status         text,
    ADD COLUMN generation     bigint      NOT NULL DEFAULT 1,
    ADD CONSTRAINT leasehold_objects_owner_whole
        CHECK ((owner_kind IS NULL) = (owner_name IS NULL)),
    ADD CONSTRAINT leasehold_objects_generation_positive CHECK (generation >= 1);

-- Garbage collection finds the objects an owner owns; only owned objects
-- are indexed.
CREATE INDEX leasehold_objects_owner
    ON leasehold_objects (cluster, owner_kind, owner_name)
 WHERE owner_kind IS NOT NULL;

-- For label selectors (`labels @> '{"app": "web"}'`), a later step. jsonb_path_ops
-- keeps the index small: one entry per label (an object without labels adds
-- one empty-item entry).
CREATE INDEX leasehold_objects_labels
    ON leasehold_objects USING gin (labels jsonb_path_ops);
