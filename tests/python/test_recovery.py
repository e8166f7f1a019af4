"""Recovery from Python (issue 39): Comm.shrink, Comm.failed_ranks, Comm.grow.

Under chorusrun -n 4 --on-failure continue: the ranks allreduce int64 vectors; rank 3 exits
after 5 steps without a word. The others' next allreduce raises; they shrink to 3
(failed_ranks == [3]) and check 20 exact allreduces on 3. Then rank 0 makes an id and starts
two new processes of this script: one with a byte of the id's secret changed, which must be
refused (authentication), and a real one; the three grow to 4 with it, rank 0 broadcasts the
step to resume from, and all four check 100 exact allreduces. Rank 0 also checks the
refused joiner's and the real joiner's exit status. Prints "recovery: ok" on each rank.

  python3 test_recovery.py               (a rank, under chorusrun)
  python3 test_recovery.py --join HEX N R [--expect-refusal]
"""
import os
import subprocess
import sys

import numpy as np

import chorus

COUNT = 1 << 16


def expect_sum(step, n):
    # Rank r contributes (r + 1) * (i + step) % 97 at element i: the sum over n ranks.
    base = (np.arange(COUNT, dtype=np.int64) + step) % 97
    return base * (n * (n + 1) // 2)


def contribution(rank, step):
    return ((np.arange(COUNT, dtype=np.int64) + step) % 97) * (rank + 1)


def train(comm, first, last, who):
    for step in range(first, last):
        buf = contribution(comm.rank, step)
        comm.allreduce(buf)
        if not np.array_equal(buf, expect_sum(step, comm.size)):
            print(f"{who}: WRONG sum at step {step} on {comm.size} ranks", flush=True)
            sys.exit(6)


def joiner(hex_id, n, rank, expect_refusal):
    uid = bytes.fromhex(hex_id)
    try:
        comm = chorus.Comm(n, uid, rank)
    except chorus.ChorusError as e:
        if expect_refusal and e.status_name == "AUTH":
            print(f"joiner with a wrong secret refused: {e}", flush=True)
            sys.exit(0)
        print(f"joiner: init failed: {e}", flush=True)
        sys.exit(3)
    if expect_refusal:
        print("joiner with a wrong secret was let in", flush=True)
        sys.exit(4)
    step = np.zeros(1, dtype=np.int64)
    comm.broadcast(step, root=0)
    train(comm, int(step[0]), int(step[0]) + 100, f"joiner rank {rank}")
    comm.destroy()
    print(f"joiner rank {rank}: 100 exact allreduces on {n} ranks", flush=True)
    sys.exit(0)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--join":
        joiner(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), "--expect-refusal" in sys.argv)
    comm = chorus.Comm.from_env()
    comm.set_timeout(30)
    me, n = comm.rank, comm.size
    assert n == 4, "run on 4 ranks"
    step = 0
    failed_at = None
    while step < 1000:
        if me == 3 and step == 5:
            os._exit(0)  # gone without a word
        buf = contribution(me, step)
        try:
            comm.allreduce(buf)
        except chorus.ChorusError as e:
            failed_at = step
            print(f"rank {me}: step {step} failed: {e}", flush=True)
            break
        assert np.array_equal(buf, expect_sum(step, n)), f"rank {me}: wrong sum at {step}"
        step += 1
    assert failed_at == 5, f"rank {me}: the loss of rank 3 was not seen at step 5 ({failed_at})"
    smaller = comm.shrink()
    lost = comm.failed_ranks()
    comm.destroy()
    assert smaller.size == 3 and lost == [3], f"rank {me}: shrunk to {smaller.size}, lost {lost}"
    assert smaller.rank == me
    train(smaller, step, step + 20, f"rank {me}")
    step += 20
    # Grow back to 4: rank 0 makes the id and starts the new processes.
    uid = chorus.Comm.unique_id() if me == 0 else None
    procs = []
    if me == 0:
        bad = bytearray(uid)
        bad[30] ^= 0xFF  # inside the secret (bytes 24-40 of the id, lib/bootstrap/id.c)
        env = dict(os.environ, CHORUS_TIMEOUT="10")
        for k in ("CHORUS_UNIQUE_ID", "CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_RANK",
                  "CHORUS_LOCAL_SIZE"):
            env.pop(k, None)
        refused = subprocess.run([sys.executable, __file__, "--join", bytes(bad).hex(), "4", "3",
                                  "--expect-refusal"], env=env, timeout=60)
        assert refused.returncode == 0, f"the wrong-secret joiner ended with {refused.returncode}"
        procs.append(subprocess.Popen([sys.executable, __file__, "--join", uid.hex(), "4", "3"],
                                      env=env))
    bigger = smaller.grow(1, uid)
    smaller.destroy()
    assert bigger.size == 4 and bigger.rank == me, f"rank {me}: grew to {bigger.size}"
    state = np.array([step], dtype=np.int64)
    bigger.broadcast(state, root=0)
    train(bigger, step, step + 100, f"rank {me}")
    bigger.destroy()
    for p in procs:
        assert p.wait(timeout=120) == 0, f"the joiner ended with {p.returncode}"
    print(f"rank {me}: recovery: ok (lost {lost} at step {failed_at}, 20 steps on 3, grew "
          f"back to 4, 100 steps)", flush=True)


if __name__ == "__main__":
    main()
