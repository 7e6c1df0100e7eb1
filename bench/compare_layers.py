#!/usr/bin/env python3
"""kiln against ONNX Runtime layer by layer: per-node times of `kiln profile --json` and of
peer/ort_profile.js, summed per (operator kind, output shape), for one model.

    /usr/bin/python3 bench/compare_layers.py resnet50 [--threads 1] [--rounds 3] [--pin auto]
                                             [--kiln build/kiln]

The two runtimes name and order their nodes differently (ONNX Runtime fuses a residual Add
into the Conv before it, kiln into the Conv after its own fusion; the stem's MaxPool may be
fused into kiln's Conv), so nodes are matched by what they produce: every Conv-like node
(Conv, FusedConv) of one output shape forms one group, other operators a group per type and
shape. Each node's time is the smallest of the rounds (alternating kiln, ONNX Runtime, one
fresh process each), which on a shared machine is the least disturbed. At one thread kiln's
node times are its thread's CPU time (KILN_PROFILE_CLOCK=thread: time descheduled left out);
ONNX Runtime's profiler gives wall time, so on a loaded machine its figures are the more
inflated and the ratio favours it. Both runtimes run on the same CPUs (--pin; by default the
first THREADS of them): logical CPUs of a shared virtual machine can differ in speed by a third
(bench/pinning.py). Groups are sorted by the larger of the two times.
"""
import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

import pinning

HERE = os.path.dirname(os.path.abspath(__file__))
CONV = ('Conv', 'FusedConv')


def shape(s):
    return tuple(int(x) for x in re.findall(r'-?\d+', s))


def key(n):
    return ('conv' if n['op_type'] in CONV else n['op_type'], shape(n['output']))


def kiln_nodes(kiln, model, threads, cpus):
    env = dict(os.environ)
    if threads == 1:
        env['KILN_PROFILE_CLOCK'] = 'thread'
    out = os.path.join('/tmp', f'compare_layers_{os.getpid()}.json')
    try:
        subprocess.run([kiln, 'profile', model, '--threads', str(threads), '--json', out],
                       capture_output=True, check=True, env=env, preexec_fn=pinning.preexec(cpus))
        with open(out) as f:
            return {n['name']: n for n in json.load(f)['nodes']}
    finally:
        if os.path.exists(out):
            os.unlink(out)


def ort_nodes(model, inputs, threads, cpus):
    r = subprocess.run(['node', os.path.join(HERE, 'peer', 'ort_profile.js'), model, inputs,
                        '--threads', str(threads)], capture_output=True, check=True, text=True,
                       preexec_fn=pinning.preexec(cpus))
    return {n['name']: n for n in json.loads(r.stdout)['nodes']}


def grouped(rounds):
    """(kind, shape) -> (node count, summed per-node minimum over the rounds, ms)."""
    total, count = defaultdict(float), defaultdict(int)
    for name, n in rounds[0].items():
        k = key(n)
        total[k] += min(r[name]['ms_per_run'] for r in rounds if name in r)
        count[k] += 1
    return total, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('model', help='a model name in bench/models (e.g. resnet50)')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--pin', default='auto',
                    help="CPUs both runtimes run on: 'auto' (default: the first THREADS CPUs, "
                         "unless that is all), 'none', or a list such as 0,1 (see bench/pinning.py)")
    ap.add_argument('--kiln', default=os.path.join(HERE, '..', 'build', 'kiln'))
    a = ap.parse_args()
    try:
        cpus = pinning.cpus_for(pinning.parse(a.pin), a.threads)
    except ValueError as e:
        ap.error(str(e))
    mdir = os.path.join(HERE, 'models', a.model)
    model, inputs = os.path.join(mdir, 'model.onnx'), os.path.join(mdir, 'inputs')
    if not os.path.exists(model):
        sys.exit(f'compare_layers: no {model} (make it with bench/make_models.py)')
    K, O = [], []
    for r in range(a.rounds):
        print(f'round {r + 1}/{a.rounds}', file=sys.stderr)
        K.append(kiln_nodes(a.kiln, model, a.threads, cpus))
        O.append(ort_nodes(model, inputs, a.threads, cpus))
    kt, kc = grouped(K)
    ot, oc = grouped(O)
    print(f'{a.model}, {a.threads} thread(s), {pinning.label(cpus)}, {a.rounds} rounds: per-node minimum ms '
          'summed per group')
    print('| kind | output | kiln nodes | kiln ms | ORT nodes | ORT ms | kiln/ORT |')
    print('|---|---|---:|---:|---:|---:|---:|')
    for k in sorted(set(kt) | set(ot), key=lambda k: -max(kt.get(k, 0), ot.get(k, 0))):
        ratio = f'{kt[k] / ot[k]:.2f}' if kt.get(k) and ot.get(k) else '-'
        print(f'| {k[0]} | {list(k[1])} | {kc.get(k, 0)} | {kt.get(k, 0):.3f} | {oc.get(k, 0)} | '
              f'{ot.get(k, 0):.3f} | {ratio} |')
    sk, so = sum(kt.values()), sum(ot.values())
    print(f'| all | | {sum(kc.values())} | {sk:.3f} | {sum(oc.values())} | {so:.3f} | {sk / so:.2f} |')


if __name__ == '__main__':
    main()
