-- What an ended session left (its files and recording as the replica that kept them listed
-- them at its end, with their expiry and why anything was refused: JSON), so List shows them
-- from any replica. NULL: nothing was kept, or it was deleted.
ALTER TABLE sessions ADD COLUMN artifacts TEXT;
