"""The ops' host output cache (torch_ext/host_cache.h): CPU outputs of 32 MiB and more reuse the
buffers of freed outputs of the same size; values never depend on what a buffer held."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from voxaug import ops
from voxaug import transforms as T

MIB = 1 << 20


def _big(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((4, 1, 128, 128, 128), generator=g)  # exactly 32 MiB of float32


def test_a_freed_output_is_reused_and_values_are_fresh():
    ops.release_host_cache()
    x = _big()
    out = T.ShiftIntensity(1.5)(x)
    assert torch.equal(out, x + 1.5)
    ptr = out.data_ptr()
    out.fill_(float("nan"))  # what the next user of the buffer must not see
    del out
    assert ops.host_cache_bytes() == 32 * MIB
    flipped = T.Flip(1)(x)  # another op, the same byte size: the same buffer, every byte rewritten
    assert flipped.data_ptr() == ptr and ops.host_cache_bytes() == 0
    assert torch.equal(flipped, torch.flip(x, [3]))
    flipped.resize_(5, 1, 128, 128, 128)  # an ordinary, resizable CPU tensor
    assert flipped.shape[0] == 5 and torch.equal(flipped[:4], torch.flip(x, [3]))
    storage = flipped.untyped_storage()
    storage.resize_(0)  # through the cache's allocator: empty, then a fresh 8-byte buffer
    storage.resize_(8)
    assert storage.nbytes() == 8
    del flipped, storage
    assert ops.release_host_cache() >= 0 and ops.host_cache_bytes() == 0


def test_small_outputs_and_other_sizes_do_not_use_it():
    ops.release_host_cache()
    small = T.ShiftIntensity(1.0)(torch.zeros(1, 1, 64, 64, 64))
    del small
    assert ops.host_cache_bytes() == 0
    x = _big()
    a = T.ShiftIntensity(1.0)(x)
    del a
    b = T.ShiftIntensity(1.0)(x[:3])  # 24 MiB: below the line, a plain allocation
    assert ops.host_cache_bytes() == 32 * MIB and torch.equal(b, x[:3] + 1.0)
    ops.release_host_cache()


def _run(code: str, env_value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VOXAUG_HOST_CACHE_MB=env_value)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_cap_and_off_switch_from_the_environment():
    code = """
        import torch
        from voxaug import ops, transforms as T
        x = torch.zeros(4, 1, 128, 128, 128)
        outs = [T.ShiftIntensity(float(i))(x) for i in range(3)]
        del outs
        print(ops.host_cache_bytes() >> 20)
    """
    capped = _run(code, "70")  # room for two 32 MiB buffers, not three
    assert capped.returncode == 0, capped.stderr
    assert capped.stdout.strip() == "64"
    off = _run(code, "0")
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "0"
    bad = _run(code, "lots")
    assert bad.returncode != 0 and "VOXAUG_HOST_CACHE_MB must be a whole number of MiB" in bad.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_children_use_the_cache_while_a_thread_allocates():
    """The cache's lock is held across fork() (pthread_atfork): a child forked while another
    thread allocates or frees outputs (a DataLoader worker) finds it unlocked and allocates, reuses
    and frees outputs itself. Run in a fresh interpreter, each child with a deadline."""
    code = """
        import os, threading, time, torch
        from voxaug import ops, transforms as T
        x = torch.zeros(4, 1, 128, 128, 128)
        stop = False
        def churn():
            while not stop:
                T.ShiftIntensity(1.0)(x)
        th = threading.Thread(target=churn)
        th.start()
        bad = 0
        for i in range(20):
            pid = os.fork()
            if pid == 0:
                torch.set_num_threads(1)  # as DataLoader workers (libgomp's pool is not forked)
                a = T.ShiftIntensity(2.0)(x)
                ok = bool((a == 2.0).all())
                del a
                b = T.ShiftIntensity(3.0)(x)
                os._exit(0 if ok and bool((b == 3.0).all()) else 3)
            deadline = time.time() + 30
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    bad += os.waitstatus_to_exitcode(status) != 0
                    break
                if time.time() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    bad += 1
                    break
                time.sleep(0.005)
        stop = True
        th.join()
        print(bad)
    """
    res = _run(code, "1024")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "0"
