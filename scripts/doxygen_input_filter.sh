#!/bin/sh
# Doxygen's INPUT_FILTER (docs/Doxyfile.in): the header with C++14 digit separators removed
# (1'000 -> 1000). Doxygen 1.9 reads such a ' as a character literal and then attaches the
# comments that follow to the wrong members, without a warning.
exec sed -E "s/([0-9])'([0-9])/\1\2/g" "$1"
