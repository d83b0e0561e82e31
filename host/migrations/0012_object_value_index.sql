-- Leasehold schema, version 12: selective lists by the value's content.
--
-- A list may ask for the objects of a kind whose value contains some JSON
-- (`{"status": "pending"}`, PostgreSQL's `@>`). Values are stored as text
-- (their compact JSON, validated by the store), so the index is on the
-- expression `value::jsonb`, and the list statements write the condition
-- as exactly that expression. jsonb_path_ops indexes one hash per path to
-- each scalar: smaller and faster for `@>` than the default operator
-- class, which would also serve key-existence operators nobody asks.
--
-- The cost falls on writes: a write that changes the value is never a
-- HOT update any more (every index of the row gets a new entry), and each
-- such write adds the value's paths to this index. A status-only write
-- leaves the value, and so stays eligible for HOT. Building the index
-- reads every object once and holds off writes meanwhile.
CREATE INDEX leasehold_objects_value
    ON leasehold_objects USING gin ((value::jsonb) jsonb_path_ops);
