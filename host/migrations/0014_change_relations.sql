-- Leasehold schema, version 14: what each change records of the object's
-- relations, so a controller can map a change of one kind to the object
-- it concerns (its owner, or the object one of its labels names) without
-- reading the object again, which a delete has already removed.
--
-- `owner_kind`/`owner_name`, `labels`: the object's owner and labels after
-- the change; for a delete, those it had. `labels` is NULL when the object
-- has none. `previous`: true only for an update that changed the owner or
-- the labels, whose values before the change are then in
-- `previous_owner_kind`/`previous_owner_name` and `previous_labels`
-- (NULL for none). Changes written before this version have no relations
-- recorded (as if the object had no owner and no labels); they are older
-- than any watcher that maps through relations.
--
-- Nullable columns and a constant default: adding them rewrites nothing.
ALTER TABLE leasehold_changes
    ADD COLUMN owner_kind          text COLLATE "C",
    ADD COLUMN owner_name          text COLLATE "C",
    ADD COLUMN labels              jsonb,
    ADD COLUMN previous            boolean NOT NULL DEFAULT false,
    ADD COLUMN previous_owner_kind text COLLATE "C",
    ADD COLUMN previous_owner_name text COLLATE "C",
    ADD COLUMN previous_labels     jsonb,
    ADD CONSTRAINT leasehold_changes_owner_whole
        CHECK ((owner_kind IS NULL) = (owner_name IS NULL)),
    ADD CONSTRAINT leasehold_changes_previous_owner_whole
        CHECK ((previous_owner_kind IS NULL) = (previous_owner_name IS NULL)),
    ADD CONSTRAINT leasehold_changes_previous_only_when_changed
        CHECK (previous OR (previous_owner_kind IS NULL AND previous_labels IS NULL));
