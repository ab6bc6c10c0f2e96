-- Whether the log-tailing relay's publication exists ($1 its name). The relay needs one (the
-- pgoutput plugin requires a publication name) but puts no table in it: the events travel as
-- logical decoding messages. The store creates it with CREATE PUBLICATION when missing.
SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)
