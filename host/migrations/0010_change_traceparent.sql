-- Leasehold schema, version 10: the trace context of each change.
--
-- `traceparent`: the W3C trace context of the write that made the change
-- (an API write's `traceparent` header, or the traced reconcile whose
-- commit it was), so the reconcile the change wakes joins that trace.
-- NULL for a write without one, and for every change written before.
-- Adding a nullable column rewrites nothing.
ALTER TABLE leasehold_changes
    ADD COLUMN traceparent text
        CONSTRAINT leasehold_changes_traceparent_length
        CHECK (traceparent IS NULL OR length(traceparent) <= 64);
