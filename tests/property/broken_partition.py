"""A deliberately broken copy of ``kvprobe.spec.model.partition_batch`` (CrossHair must refute it).

The bug: entries are submitted without comparing generations, so a step-batch
entry whose state was replaced by a newer generation since the lookup is
probed under the old generation (the flush-submits-cleaned defect).  The
contracts are those of the real function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

Key = bytes


def _keys_of(groups: Iterable[tuple[str, list[Key], list[int]]]) -> set[Key]:
    return {key for _, keys, _ in groups for key in keys}


def partition_batch(
    entries: Sequence[tuple[Key, int, str]], pending: Mapping[Key, tuple[int, frozenset[str]]]
) -> list[tuple[str, list[Key], list[int]]]:
    """Group this step's entries by request (broken: generations are not compared).

    post: all(len(ks) == len(gs) and ks for _, ks, gs in __return__)
    post: len({r for r, _, _ in __return__}) == len(__return__)
    post: all(k in pending and pending[k][0] == g for _, ks, gs in __return__ for k, g in zip(ks, gs))
    post: all(r in pending[k][1] for r, ks, _ in __return__ for k in ks)
    post: sum(len(ks) for _, ks, _ in __return__) == len(_keys_of(__return__))
    """
    groups: dict[str, tuple[list[Key], list[int]]] = {}
    seen: set[Key] = set()
    for key, gen, req in entries:
        live = pending.get(key)
        if live is None or key in seen or not live[1]:  # BUG: live[0] != gen is not checked
            continue
        seen.add(key)
        if req not in live[1]:
            req = min(live[1])
        slot = groups.setdefault(req, ([], []))
        slot[0].append(key)
        slot[1].append(gen)
    return [(req, keys, gens) for req, (keys, gens) in groups.items()]
