-- What the connector's user needs on MySQL 8.4: replication, and SELECT to read table definitions.
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'sluice'@'%';
