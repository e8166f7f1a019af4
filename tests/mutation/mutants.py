#!/usr/bin/env python3
"""Reads tests/mutation/mutants.txt and applies one mutant; the helper of run.sh.

    mutants.py ids    LIST                   the ids, one a line
    mutants.py check  LIST TREE [ID...]      id, file:line, description (tab-separated);
                                             exit 3 when a snippet is not exactly once
    mutants.py kills  LIST ID                the mutant's kill commands, one a line
    mutants.py apply  LIST TREE ID SAVEDIR   saves the file under SAVEDIR, writes the mutant
                                             and prints file:line; exit 3 when the snippet
                                             does not occur exactly once (a stale mutant)
"""
import os
import sys

KEYS = ("id", "file", "desc", "from", "to", "kill")


def parse(path):
    mutants, cur = [], {}

    def close(lineno):
        if not cur:
            return
        missing = [k for k in KEYS if k not in cur]
        if missing:
            sys.exit(f"{path}:{lineno}: mutant {cur.get('id', '?')} lacks {', '.join(missing)}")
        mutants.append(dict(cur))
        cur.clear()

    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if line.startswith("#"):
            continue
        if not line.strip():
            close(n)
            continue
        key, sep, val = line.partition(":")
        if not sep or key not in KEYS:
            sys.exit(f"{path}:{n}: expected one of {', '.join(KEYS)}: {line!r}")
        val = val.strip()
        if key == "kill":
            cur.setdefault("kill", []).append(val)
        elif key in cur:
            sys.exit(f"{path}:{n}: second {key} in mutant {cur.get('id', '?')}")
        else:
            cur[key] = val
    close(len(lines))
    ids = [m["id"] for m in mutants]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        sys.exit(f"{path}: duplicate ids: {', '.join(dup)}")
    return mutants


def find(mutants, mid):
    for m in mutants:
        if m["id"] == mid:
            return m
    sys.exit(f"no mutant {mid}")


def locate(tree, m):
    """(text, offset, file:line), or (None, None, reason) when not exactly once."""
    path = os.path.join(tree, m["file"])
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return None, None, f"{m['file']}: {e.strerror}"
    n = text.count(m["from"])
    if n != 1:
        return None, None, f"{m['file']}: the snippet occurs {n} times, not once"
    at = text.index(m["from"])
    return text, at, f"{m['file']}:{text.count(chr(10), 0, at) + 1}"


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd, mutants = argv[1], parse(argv[2])
    if cmd == "ids":
        for m in mutants:
            print(m["id"])
    elif cmd == "check":
        tree, bad = argv[3], 0
        want = argv[4:]
        for m in mutants:
            if want and m["id"] not in want:
                continue
            text, _, where = locate(tree, m)
            if text is None:
                bad = 1
                where = "STALE " + where
            print(f"{m['id']}\t{where}\t{m['desc']}")
        return 3 if bad else 0
    elif cmd == "kills":
        for k in find(mutants, argv[3])["kill"]:
            print(k)
    elif cmd == "apply":
        tree, m, save = argv[3], find(mutants, argv[4]), argv[5]
        text, at, where = locate(tree, m)
        if text is None:
            print(where)
            return 3
        dst = os.path.join(save, m["file"])
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.join(tree, m["file"]), "w", encoding="utf-8") as f:
            f.write(text[:at] + m["to"] + text[at + len(m["from"]):])
        print(where)
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
