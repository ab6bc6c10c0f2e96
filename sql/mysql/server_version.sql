-- migrate checks the server first: its version text ("8.0.36", "10.11.6-MariaDB-...",
-- "5.7.25-TiDB-v7.5.0") and whether it replicates by Galera (wsrep: MariaDB Galera Cluster,
-- Percona XtraDB Cluster), where SKIP LOCKED is not safe. @@wsrep_on does not exist on a server
-- built without Galera, hence the lookup.
SELECT VERSION(),
       COALESCE((SELECT variable_value FROM information_schema.global_variables
                 WHERE variable_name = 'wsrep_on'), 'OFF')
