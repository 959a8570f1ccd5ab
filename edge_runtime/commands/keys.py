"""`edge-runtime keys new NAME`: an Ed25519 key pair for signing model packages.

The private key stays with whoever signs releases; the public key goes to the boxes (`trust.keys`).
"""

from __future__ import annotations

import argparse

from edge_runtime.package.signing import generate_keys, read_public_key

__all__ = ["run_keys"]


def run_keys(args: argparse.Namespace) -> int:
    private_path, public_path = generate_keys(args.name, args.dir)
    key = read_public_key(public_path)
    print(f"private key: {private_path} (mode 0600: keep it off the boxes, sign with it)")
    print(f"public key:  {public_path} (list it in trust.keys on the boxes)")
    print(f"key id:      {key.key_id}")
    return 0
