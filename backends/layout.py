"""Where a key's block lives: one relative name shared by every real backend.

The filesystem backends join this name to their root directory; the object
store backend prepends its prefix.  Because all three use the same function,
a tree written by one is read correctly by the others.

Rules (they make the name safe by construction, not by sanitising):

* The name is ``<s1>/<s2>/<leaf>``.  Every character of every component is
  one of ``0-9 a-f _`` or comes from the fixed words ``empty`` and
  ``sha256-``, so no component is ``.``/``..``, contains ``/`` or NUL, or
  starts with ``.``; a joined path therefore never leaves its root.
* ``leaf`` is the key's full hex for keys of 1 to :data:`MAX_DIRECT_BYTES`
  bytes, so distinct keys get distinct names.  In particular a block hash
  followed by a 4-byte group index (vLLM's offload keys) and the same hash
  with another index, or with none, never share a file.  They share the shard
  directories, which come from the leading bytes.
* Longer keys would exceed the 255-byte file-name limit, so their leaf is
  ``sha256-<hex digest of the key>``: it cannot collide with a direct leaf
  (those have no ``s``/``-``) and a digest collision is not a practical risk.
* The empty key's leaf is ``empty``.
* ``s1``/``s2`` are the first and second byte (as hex) of the key, or of the
  digest for long keys, with ``__`` when the key is too short.  Sharding keeps
  directories small: 65,536 leaf directories for random hashes.
"""

from __future__ import annotations

import hashlib

from kvprobe.backends.base import Key, check_key

__all__ = ["MAX_DIRECT_BYTES", "relative_name"]

#: Keys up to this many bytes are named by their hex (2 chars per byte, well
#: under the usual 255-byte file-name limit); longer keys by a SHA-256 digest.
MAX_DIRECT_BYTES = 64


def relative_name(key: Key) -> str:
    """The ``/``-separated name of ``key``'s block, relative to a root or prefix.

    Deterministic and injective on keys of up to :data:`MAX_DIRECT_BYTES`
    bytes; see the module docstring for the rules.

    Raises:
        TypeError: ``key`` is not ``bytes`` (the message names its type).
    """
    key = check_key(key)
    if len(key) > MAX_DIRECT_BYTES:
        digest = hashlib.sha256(key).hexdigest()
        return f"{digest[0:2]}/{digest[2:4]}/sha256-{digest}"
    hexed = key.hex()
    if not hexed:
        return "__/__/empty"
    return f"{hexed[0:2]}/{(hexed[2:4] or '__')}/{hexed}"
