#!/bin/sh
# An application built with pkg-config alone: outbox-sqlite.pc brings outbox.pc (the core,
# nlohmann_json, -pthread) and sqlite3.pc, and names SOCI's libraries. C++20 is the
# application's choice, so it is not in the .pc files. CXX defaults to c++.
set -eu
# shellcheck disable=SC2046 # the flags are separate words
${CXX:-c++} -std=c++20 -o app main.cpp $(pkg-config --cflags --libs outbox-sqlite)
