#!/usr/bin/env python3
"""bench/speed_table.py reads what ferry writes: a real `ferry train` on the simulated device (a
tiny model, five steps) gives the table its steps, the plan's prediction, every host-memory phase
against the plan and the device plan; the peer's JSON line is found among its other output; the
table's ratio is ferry's steady steps over the peer's rate, and a skipped row says why.

    bench_speed_table_test.py FERRY_BINARY
"""
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("speed_table", os.path.join(ROOT, "bench", "speed_table.py"))
speed_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(speed_table)
FERRY = None


class ReadsFerrysLog(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        d = cls.dir.name
        env = dict(os.environ, FERRY_CACHE_DIR=os.path.join(d, "cache"))
        subprocess.run([FERRY, "init", "--arch", "llama", "--preset", "tiny", "--out", os.path.join(d, "model")],
                       check=True, capture_output=True, env=env)
        rng = random.Random(0)
        with open(os.path.join(d, "data.jsonl"), "w") as f:
            for _ in range(64):
                f.write(json.dumps({"input_ids": [rng.randrange(200) for _ in range(64)]}) + "\n")
        with open(os.path.join(d, "train.yaml"), "w") as f:
            f.write(f"model: {d}/model\ndata: {d}/data.jsonl\noutput_dir: {d}/out\nseq_len: 64\nglobal_batch: 8\n"
                    "micro_batch: 2\nmax_steps: 5\nlearning_rate: 1.0e-4\nwarmup_steps: 0\ndevice: sim\n"
                    "gpu_memory: 1GiB\nmax_grad_norm: 1.0\nsave_steps: 0\n")
        run = subprocess.run([FERRY, "train", os.path.join(d, "train.yaml")], capture_output=True, text=True, env=env)
        cls.log = run.stdout + run.stderr
        if run.returncode != 0:
            raise AssertionError("ferry train failed:\n" + cls.log)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_steps_and_steady_steps(self):
        got = speed_table.read_ferry_log(self.log)
        self.assertEqual(len(got["steps"]), 5, self.log)
        self.assertTrue(all(t > 0 for t in got["steps"]))
        self.assertEqual(got["steady"], got["steps"][2:])

    def test_prediction_and_memory_against_the_plan(self):
        got = speed_table.read_ferry_log(self.log)
        self.assertIsNotNone(got["predicted"], self.log)
        self.assertGreater(got["predicted"], 0)
        # Six phases (model load, planning, state commit, first step, steady state, final save);
        # the plan's total is the largest planned, and no phase went past it.
        self.assertEqual(len(speed_table.HOST_PHASE_RE.findall(self.log)), 6, self.log)
        self.assertGreater(got["host_plan_gib"], 0)
        self.assertLessEqual(got["host_peak_gib"], got["host_plan_gib"])
        self.assertLessEqual(got["host_worst_phase"], 1.0)
        self.assertIsNotNone(got["gpu_plan_gib"], self.log)
        self.assertLess(got["gpu_plan_gib"], 1.0)


class ReadsThePeerAndPrintsTheTable(unittest.TestCase):
    PEER = ('compiling 16 layers...\n{"model": "llama3-8b", "mode": "gpucn", "clip": true, "mb": 2, "tok_s": 12000}\n'
            "done\n")

    def test_sizes(self):
        self.assertAlmostEqual(speed_table.gib("512", "MiB"), 0.5)
        self.assertAlmostEqual(speed_table.gib("1048576", "KiB"), 1.0)
        self.assertAlmostEqual(speed_table.gib("0", "bytes"), 0.0)

    def test_the_peer_line_among_other_output(self):
        self.assertEqual(speed_table.read_peer_output(self.PEER)["tok_s"], 12000)
        self.assertIsNone(speed_table.read_peer_output("Traceback (most recent call last):\n  OOM\n"))

    def test_ratio_and_skipped_rows(self):
        log = "".join(f"step {k}/5 | loss 1.0 | {t} tok/s | GPU\n" for k, t in
                      enumerate([9000, 10200, 10800, 10500, 11400], 1))
        log += "predicted step time 6.0 s (10923 tokens/s): bound by GPU compute\n"
        log += "device memory plan: 22.50 GiB of 24.00 GiB (slots 1 GiB)\npeak memory: GPU 22.40 GiB, pinned\n"
        log += "host memory, steady state: peak 117.50 GiB of 118.00 GiB planned (99.6%)\n"
        log += "[   48.96s info] CPU AdamW: 4.88 G params/s in the steps (the profile: 5.42 alone, 3.69 beside " \
               "copies both ways)\n"
        row = {"row": "8b-24gib", "gpu": "H200", "clip": True, "ferry": speed_table.read_ferry_log(log),
               "peer": speed_table.read_peer_output(self.PEER)}
        skipped = {"row": "3b", "gpu": "H100", "clip": True, "skipped": "needs a card of 100 GB or more"}
        lines = speed_table.table([row, skipped]).splitlines()
        self.assertIn("| 10,500-11,400 (10,800) | 10,923 | 12,000 (mb 2, clip) | 0.875-0.950x |", lines[2])
        self.assertIn("117.50 (118.00) GiB", lines[2])
        self.assertIn("22.40 (22.50) GiB", lines[2])
        self.assertIn("skipped: needs a card of 100 GB or more", lines[3])
        self.assertIn("99.6% of its plan", lines[-3])
        self.assertEqual(lines[-1], "CPU AdamW in the steps against the profile's rate alone (G params/s): "
                                    "8b-24gib 4.88 of 5.42 (0.90x).")

    def test_a_log_without_the_run_ends_cpu_line_has_none(self):
        self.assertIsNone(speed_table.read_ferry_log("step 1/5 | loss 1.0 | 9000 tok/s | GPU\n")["cpu_adamw"])

    def test_a_rows_budget(self):
        h200, h100 = 143771, 81559  # MiB, as nvidia-smi gives them
        self.assertEqual(speed_table.row_budget(False, h200, "card"), "24GiB")
        self.assertEqual(speed_table.row_budget(True, h200, "fixed"), "130GiB")
        self.assertEqual(speed_table.row_budget(True, h100, "fixed"), "76GiB")
        self.assertEqual(speed_table.row_budget(True, h200, "card"), "auto")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench_speed_table_test.py FERRY_BINARY")
    FERRY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
