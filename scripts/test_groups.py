#!/usr/bin/env python3
"""The names of the tests of one group of a build, one per line (scripts/test.sh).

Usage: test_groups.py BUILD_DIR GROUP [--no-suite SUITE]...

A test belongs to the servers its suites name: postgresql (or pg_restart), mysql, amqp. Two
tests that share a database server must not run at once (they see each other's outbox rows,
notifications and replication slots), nor two that use RabbitMQ (its fault tests restart the
node). The groups split the tests so that scripts/test.sh can run them in lanes:
  postgresql       PostgreSQL, not RabbitMQ, no server restart
  postgresql_amqp  PostgreSQL and RabbitMQ, no server restart
  pg_restart       restart the PostgreSQL server, not RabbitMQ
  pg_restart_amqp  restart the PostgreSQL server, and RabbitMQ
  mysql            MariaDB, not RabbitMQ
  mysql_amqp       MariaDB and RabbitMQ
  amqp             RabbitMQ, neither database server
  local            no server
"""

import json
import subprocess
import sys

GROUPS = ("postgresql", "postgresql_amqp", "pg_restart", "pg_restart_amqp", "mysql",
          "mysql_amqp", "amqp", "local")


def group_of(suites):
    amqp = "amqp" in suites
    suffix = "_amqp" if amqp else ""
    if "pg_restart" in suites:
        return "pg_restart" + suffix
    if "postgresql" in suites:
        return "postgresql" + suffix
    if "mysql" in suites:
        return "mysql" + suffix
    return "amqp" if amqp else "local"


def main(argv):
    if len(argv) < 3 or argv[2] not in GROUPS:
        sys.exit(f"usage: {argv[0]} BUILD_DIR {{{','.join(GROUPS)}}} [--no-suite SUITE]...")
    build, group, rest = argv[1], argv[2], argv[3:]
    excluded = set()
    while rest:
        if rest[0] != "--no-suite" or len(rest) < 2:
            sys.exit(f"{argv[0]}: unexpected argument {rest[0]}")
        excluded.add(rest[1])
        rest = rest[2:]
    tests = json.loads(
        subprocess.run(["meson", "introspect", build, "--tests"], check=True,
                       capture_output=True, text=True).stdout)
    names = [t["name"] for t in tests]
    if len(names) != len(set(names)):
        sys.exit(f"{argv[0]}: two tests share a name; the groups select tests by name")
    for t in tests:
        suites = {s.split(":")[-1] for s in t["suite"]}
        if group_of(suites) == group and not suites & excluded:
            print(t["name"])


if __name__ == "__main__":
    main(sys.argv)
