-- How a session's browser presents itself (locale, time zone, user agent, geolocation, colour
-- scheme, extra headers), as the JSON of browserpool_pool::Emulation, so Get and List echo it
-- from any replica. NULL: nothing emulated.
ALTER TABLE sessions ADD COLUMN emulation TEXT;
