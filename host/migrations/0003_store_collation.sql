-- Leasehold schema, version 3: object names sort byte-wise.
--
-- Listings are paged by name (`name > cursor ORDER BY name`). Under a
-- locale collation the order (and so the paging) would depend on how the
-- database was created, and differ from the memory backend's. Kinds and
-- names are ASCII DNS labels, for which the "C" collation is plain byte
-- order. Changing the column collation rebuilds the primary key index in
-- that order, so paging stays an index range scan.
ALTER TABLE leasehold_objects
    ALTER COLUMN kind TYPE text COLLATE "C",
    ALTER COLUMN name TYPE text COLLATE "C";
