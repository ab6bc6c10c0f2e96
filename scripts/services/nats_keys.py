#!/usr/bin/env python3
"""NKeys and JWTs for the test nats-servers of scripts/services/nats.sh (throwaway keys).

  nats_keys.py nkey DIR NAME   DIR/NAME.pub (a user's public key, U...) and DIR/NAME.nk (its
                               seed, SU...)
  nats_keys.py creds DIR       an operator, an account and a user under it: DIR/operator.jwt,
                               DIR/account.pub, DIR/account.jwt, DIR/user.creds (the user's JWT
                               and seed); and DIR/rogue.creds, a user of an account the operator
                               never signed

Keys are Ed25519 (python3-cryptography), encoded as nats-io/nkeys does: prefix bytes, the key,
CRC-16/XMODEM little-endian, base32 without padding. JWTs as nats-io/jwt v2 writes them:
header and claims in base64url, signed with the issuer's key (alg ed25519-nkey).
"""

import base64
import hashlib
import json
import sys
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (Encoding, NoEncryption, PrivateFormat,
                                                          PublicFormat)

PREFIX = {"operator": 14 << 3, "account": 0, "user": 20 << 3}
SEED = 18 << 3


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


def b32(raw):
    return base64.b32encode(raw + crc16(raw).to_bytes(2, "little")).decode().rstrip("=")


def b64url(raw):
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class Key:
    def __init__(self, kind):
        self.kind = kind
        self.key = Ed25519PrivateKey.generate()
        prefix = PREFIX[kind]
        public = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        seed = self.key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        self.public = b32(bytes([prefix]) + public)
        self.seed = b32(bytes([SEED | prefix >> 5, (prefix & 31) << 3]) + seed)


def jwt(issuer, subject, name, nats):
    claims = {"iat": int(time.time()), "iss": issuer.public, "name": name, "sub": subject.public,
              "nats": dict(nats, version=2)}
    # jti: the hash of the claims without it (nats-io/jwt's).
    claims["jti"] = base64.b32encode(
        hashlib.new("sha512_256", json.dumps(claims, separators=(",", ":")).encode())
        .digest()).decode().rstrip("=")
    head = b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = b64url(json.dumps(claims, separators=(",", ":")).encode())
    signature = issuer.key.sign(f"{head}.{body}".encode())
    return f"{head}.{body}.{b64url(signature)}"


def write(path, text):
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def creds_file(user_jwt, user):
    return (f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n")


def make_creds(d):
    operator, account, user = Key("operator"), Key("account"), Key("user")
    unlimited = {"subs": -1, "data": -1, "payload": -1}
    write(f"{d}/operator.jwt", jwt(operator, operator, "outbox-test", {"type": "operator"}) + "\n")
    write(f"{d}/account.pub", account.public + "\n")
    write(f"{d}/account.jwt", jwt(operator, account, "outbox", {
        "type": "account",
        "limits": dict(unlimited, imports=-1, exports=-1, wildcards=True, conn=-1, leaf=-1)}))
    user_claims = dict(unlimited, type="user", pub={}, sub={})
    write(f"{d}/user.creds", creds_file(jwt(account, user, "relay", user_claims), user))
    rogue_account, rogue = Key("account"), Key("user")
    write(f"{d}/rogue.creds", creds_file(jwt(rogue_account, rogue, "rogue", user_claims), rogue))


def main(argv):
    if len(argv) == 4 and argv[1] == "nkey":
        key = Key("user")
        write(f"{argv[2]}/{argv[3]}.pub", key.public + "\n")
        write(f"{argv[2]}/{argv[3]}.nk", key.seed + "\n")
    elif len(argv) == 3 and argv[1] == "creds":
        make_creds(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
