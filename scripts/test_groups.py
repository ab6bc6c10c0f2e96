#!/usr/bin/env python3
"""The groups of the tests of a build by the servers they use, and the lanes they run in
(scripts/test_lanes.sh).

Usage: test_groups.py BUILD_DIR GROUP [--no-suite SUITE]...   the names of GROUP's tests, one a line
       test_groups.py --lanes BUILD_DIR SETS    the lanes for SETS (1 or 2) sets of servers: a
                                                line per group, LANE GROUP JOBS LOCKS SET, in
                                                the order their logs are collected
       test_groups.py --servers                 the servers, one a line

The servers are the files of scripts/services/ (<name>.sh, but common.sh); a test uses those its
suites name, the suite of a server's tests being its name (pg_restart: tests that restart the
PostgreSQL server). Two tests that share a server must not run at once (they see each other's
outbox rows, notifications, replication slots and queues, and fault tests restart servers).
The two database servers, PostgreSQL and MariaDB, have lanes of their own; every other server
(RabbitMQ, and any server added later) is shared by the lanes under a lock of its own (flock,
one per set). The groups:
  postgresql       PostgreSQL, no other server, no server restart
  pg_restart       restart the PostgreSQL server, no other server
  mysql            MariaDB, no other server
  D_S              those of group D (one of the three) that also use the locked servers S:
                   postgresql_amqp, pg_restart_amqp, mysql_amqp (several: S joined by _)
  S                locked servers S, neither database server: amqp
  local            no server
The groups of at most one locked server are always planned (scripts/test.sh reports each, empty
or not); those of several only when a test of the build uses that set of servers.
"""

import itertools
import json
import pathlib
import subprocess
import sys

SERVICES = pathlib.Path(__file__).resolve().parent / "services"
# The servers with lanes of their own; the others are locked.
DATABASES = ("postgresql", "mysql")


def servers():
    return sorted(p.stem for p in SERVICES.glob("*.sh") if p.stem != "common")


def locked_servers():
    return [s for s in servers() if s not in DATABASES]


def base_of(suites):
    """The database group of a test ("" for none): a restart first, PostgreSQL before MariaDB."""
    return next((g for g in ("pg_restart", "postgresql", "mysql") if g in suites), "")


def name(base, locks):
    return "_".join(([base] if base else []) + list(locks)) or "local"


def group_of(suites, locked):
    return name(base_of(suites), [s for s in locked if s in suites])


def lock_sets(locked, used):
    """The sets of locked servers that get a group: each alone, and the larger ones in `used`."""
    out = []
    for n in range(1, len(locked) + 1):
        out += [c for c in itertools.combinations(locked, n) if n == 1 or c in used]
    return out


def lanes(sets, locks):
    """(lane, group, jobs, locks, set) for each group, in the order their logs are collected."""
    two = sets == 2
    rows = [(1, "postgresql", 1, (), 1), (3 if two else 1, "pg_restart", 1, (), 2 if two else 1)]
    for c in locks:
        for base in ("pg_restart", "postgresql"):
            rows.append((3 if two else 1, name(base, c), 1, c, 2 if two else 1))
    rows.append((2, "mysql", 1, (), 1))
    rows += [(4 if two else 2, name("mysql", c), 1, c, 2 if two else 1) for c in locks]
    rows += [(5 if two else 3, name("", c), 1, c, 1) for c in locks]
    rows.append((6 if two else 3, "local", 2, (), "-"))
    return rows


def load(build):
    tests = json.loads(
        subprocess.run(["meson", "introspect", build, "--tests"], check=True,
                       capture_output=True, text=True).stdout)
    names = [t["name"] for t in tests]
    if len(names) != len(set(names)):
        sys.exit(f"{sys.argv[0]}: two tests share a name; the groups select tests by name")
    return [(t["name"], {s.split(":")[-1] for s in t["suite"]}) for t in tests]


def main(argv):
    locked = locked_servers()
    if argv[1:] == ["--servers"]:
        print("\n".join(servers()))
        return
    if len(argv) == 4 and argv[1] == "--lanes" and argv[3] in ("1", "2"):
        used = {tuple(s for s in locked if s in suites) for _, suites in load(argv[2])}
        for lane, group, jobs, locks, server_set in lanes(int(argv[3]), lock_sets(locked, used)):
            print(lane, group, jobs, ",".join(locks) or "-", server_set)
        return
    every = lock_sets(locked, set(itertools.chain.from_iterable(
        itertools.combinations(locked, n) for n in range(2, len(locked) + 1))))
    groups = [row[1] for row in lanes(1, every)]
    if len(argv) < 3 or argv[2] not in groups:
        sys.exit(f"usage: {argv[0]} BUILD_DIR {{{','.join(groups)}}} [--no-suite SUITE]...\n"
                 f"       {argv[0]} --lanes BUILD_DIR {{1,2}}\n"
                 f"       {argv[0]} --servers")
    build, group, rest = argv[1], argv[2], argv[3:]
    excluded = set()
    while rest:
        if rest[0] != "--no-suite" or len(rest) < 2:
            sys.exit(f"{argv[0]}: unexpected argument {rest[0]}")
        excluded.add(rest[1])
        rest = rest[2:]
    for test, suites in load(build):
        if group_of(suites, locked) == group and not suites & excluded:
            print(test)


if __name__ == "__main__":
    main(sys.argv)
