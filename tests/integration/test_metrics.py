"""test_metrics.py - Prometheus metrics on every service (docs/observability.md).

Real processes: `tessera up --metrics-port BASE` (the master on BASE, shard i on BASE + i),
`tessera train --metrics-port W` (rank r on W + r), and Debian's Prometheus scraping all of
them every second. Checked:
- every endpoint answers GET /metrics in the text format: each family has HELP and TYPE,
  every sample line parses, histogram buckets never decrease and end in +Inf equal to
  _count; the families the docs promise are there (the master's epoch and members, the
  shards' push and pull histograms and byte counters, the workers' steps, the calls of
  lib/rpc by method and code);
- only rank 0 evaluates, so only rank 0 exports tessera_worker_loss, _train_accuracy and
  _test_accuracy, and their series appear with its first evaluation, never at a 0 nobody
  measured; rank 1 has none of the three families;
- during training the worker's tessera_worker_steps_total rises between two scrapes, and a
  scrape every 100 ms beside it never stops the steps;
- Prometheus, given a generated config, scrapes them: a PromQL query through its HTTP API
  shows tessera_worker_steps_total rising, and histogram_quantile gives the p99 of the
  shards' push latency;
- after the training (kept), `tessera snapshot create`: the master counts it
  (tessera_snapshots_total{result="ok"}, its duration and the bytes written);
- POST is 405 with an Allow header, an unknown path 404, a request with 40 KB of headers
  431; the service answers /metrics normally right after;
- where the endpoints listen: with gRPC on loopback (tessera up, tessera train), every
  /metrics answers on 127.0.0.1 and refuses a connection to the machine's non-loopback
  address; a master given --metrics-listen 0.0.0.0 answers on that address (skipped, with
  the reason printed, on a machine with no such address);
- deploy/grafana/tessera.json: every expression of the dashboard names only metrics the
  services export; it has the query variables job_id and instance (label_values, several
  values or All), every metric selector filters instance=~"$instance", and job_id=~"$job_id"
  where the metric has a job_id label; every target has a legend, which names each label of
  its `by (...)` (le aside), or, for a series drawn as scraped, each label the series has
  (instance among them), and no label the result does not have; a broken copy of the
  dashboard (a legend gone, a variable unused) is refused by the same check;
- the master's status page: `/` is one HTML page that fetches nothing from elsewhere;
  /api/status lists both shards alive, with what each says of itself (pid, partitions it
  heads and follows, bytes: the figures of `tessera status --json`), and the job with its
  progress points (a per-sample loss), and each worker with its job and rank; headless
  Chromium renders the page: two shard rows with their chains, the two workers' rows with
  the job, no departed workers (their fold hidden), the job's row, a loss plot with its
  points; its screenshot is kept in BUILD/artifacts/status-page.png ($TESSERA_ARTIFACTS to
  change); `tessera up` printed the page's URL;
- after the training the two workers have left: the page lists no live worker and folds
  both into a closed "2 departed: 2 left" element, rows with their job inside.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True
import tessera_testlib as tl  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                    r',?)*\})? (-?[0-9.eE+-]+|[+-]Inf|NaN)$')
STEPS = 1000
# Rank 0 sleeps this long before each step: the training lasts 30 s at least, so that what
# is checked while it runs (Prometheus scraping the workers, the page's live workers) finds
# it running on a loaded machine too.
SLOW_MS = 30
# The families only rank 0 exports, from its first evaluation on.
EVALS = ("tessera_worker_loss", "tessera_worker_train_accuracy", "tessera_worker_test_accuracy")
# The status page's screenshot is kept here (a test artifact).
ARTIFACTS = os.environ.get("TESSERA_ARTIFACTS") or os.path.join(
    os.path.dirname(os.path.abspath(tl.BIN)), "artifacts")


def get(port, path="/metrics", method="GET", headers=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 headers=headers or {}, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def parse(text):
    """{family: type}, [(name, labels, value)]; AssertionError on any line that is not the
    text format."""
    types, helps, samples = {}, set(), []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split()[2])
        elif line.startswith("# TYPE "):
            types[line.split()[2]] = line.split()[3]
        else:
            m = SAMPLE.match(line)
            if not m:
                raise AssertionError("not a sample line: %r" % line)
            samples.append((m.group(1), m.group(2) or "", float(m.group(3))))
    if set(types) != helps:
        raise AssertionError("families without HELP or TYPE: %s" % (set(types) ^ helps))
    return types, samples


def check_histograms(types, samples):
    for fam, t in types.items():
        if t != "histogram":
            continue
        series = {}
        for name, labels, v in samples:
            if name == fam + "_bucket":
                key = re.sub(r',?le="[^"]*"', "", labels)
                series.setdefault(key, []).append(v)
        counts = {labels.replace("{}", ""): v for name, labels, v in samples
                  if name == fam + "_count"}
        for key, buckets in series.items():
            if buckets != sorted(buckets):
                raise AssertionError("%s%s: buckets decrease: %s" % (fam, key, buckets))
            if buckets[-1] != counts.get(key.replace("{}", "")):
                raise AssertionError("%s%s: +Inf %s != _count" % (fam, key, buckets[-1]))


def outside_address():
    """An IPv4 address of this machine that is not loopback, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))   # a UDP connect picks the route's source; sends nothing
        addr = s.getsockname()[0]
    except OSError:
        addr = None
    finally:
        s.close()
    if addr and not addr.startswith("127."):
        return addr
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None,
                                                     socket.AF_INET)}
    except OSError:
        return None
    return next((a for a in sorted(addrs) if not a.startswith("127.")), None)


def connects(addr, port):
    try:
        socket.create_connection((addr, port), timeout=3).close()
        return True
    except OSError:
        return False


def family_labels(samples):
    """{family: set of its label names} (le aside; _bucket, _sum, _count under the family)."""
    out = {}
    for name, labels, _ in samples:
        fam = re.sub(r"_(bucket|sum|count)$", "", name)
        names = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', labels)) - {"le"}
        out.setdefault(fam, set()).update(names)
        out.setdefault(name, set()).update(names)
    return out


AGGREGATION = re.compile(r"\b(sum|max|min|avg|count|topk|bottomk|quantile)\b")


def dashboard_problems(dash, labels):
    """What is wrong with the Grafana dashboard dash, given {family: label names} of what
    the services export: a list of sentences, empty if nothing."""
    problems = []
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    for name in ("job_id", "instance"):
        v = variables.get(name)
        q = v and (v.get("query") if isinstance(v.get("query"), str)
                   else (v.get("query") or {}).get("query", ""))
        if not v or v.get("type") != "query" or not re.match(
                r"label_values\(.+,\s*%s\)$" % name, q or ""):
            problems.append("variable %s: want a query variable label_values(..., %s)" %
                            (name, name))
        elif not (v.get("multi") and v.get("includeAll") and v.get("allValue") == ".*"):
            problems.append("variable %s: want multi, includeAll and allValue .*" % name)
    for panel in dash["panels"]:
        for t in panel["targets"]:
            where = "panel %r target %s" % (panel["title"], t.get("refId"))
            expr, legend = t["expr"], t.get("legendFormat", "")
            for m in re.finditer(r"\b(tessera_[a-z_]+)(\{[^}]*\})?", expr):
                fam, sel = m.group(1), m.group(2) or ""
                if fam not in labels:
                    problems.append("%s: %s is no metric the services export" % (where, fam))
                    continue
                if 'instance=~"$instance"' not in sel:
                    problems.append("%s: %s not filtered by $instance" % (where, fam))
                if "job_id" in labels[fam] and 'job_id=~"$job_id"' not in sel:
                    problems.append("%s: %s not filtered by $job_id" % (where, fam))
            if not legend.strip():
                problems.append("%s: no legendFormat" % where)
                continue
            by = [set(re.split(r"\s*,\s*", b.strip())) - {"le"}
                  for b in re.findall(r"\bby \(([^)]*)\)", expr)]
            if by:
                have = set.intersection(*by)
            elif AGGREGATION.search(expr):
                have = set()
            else:   # drawn as scraped: every label of its series, and the target's
                have = set().union(*[labels.get(f, set()) for f in
                                     re.findall(r"\btessera_[a-z_]+", expr)]) | {"instance"}
            named = set(re.findall(r"\{\{\s*([a-zA-Z_]+)\s*\}\}", legend))
            if have - named:
                problems.append("%s: legend %r does not name %s" % (where, legend,
                                                                   sorted(have - named)))
            if named - have - ({"job"} if not by and not AGGREGATION.search(expr) else set()):
                problems.append("%s: legend %r names %s, which the result has not" % (
                    where, legend, sorted(named - have)))
    return problems


def value(samples, name, labels_contain=""):
    return sum(v for n, lab, v in samples if n == name and labels_contain in lab)


class Metrics(tl.ClusterCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = tl.Cluster()
        cls.base = tl.free_ports(3)
        cls.wbase = tl.free_ports(2)
        cls.up, cls.master = cls.c.tessera_up(["--shards", "2", "--metrics-port",
                                               str(cls.base), "--store",
                                               os.path.join(cls.c.dir, "store")])
        cls.train = cls.c.spawn([os.path.join(tl.BIN, "tessera"), "train", "--master",
                                 cls.master, "--workers", "2", "--steps", str(STEPS),
                                 "--exact", "--job", "metrics", "--slow", "0:%d" % SLOW_MS,
                                 "--keep",
                                 "--metrics-port", str(cls.wbase), "--json"], "train",
                                stdout_pipe=True)
        cls.ports = [cls.base, cls.base + 1, cls.base + 2, cls.wbase, cls.wbase + 1]
        # Each rank serves /metrics once it has connected; rank 1 may come up well after
        # rank 0 has pushed on a loaded machine, so wait for every endpoint.
        for port in cls.ports:
            tl.wait_until(lambda: get(port)[0] == 200 if cls.train.running() else "gone",
                          60, "/metrics on port %d" % port)
        cls.watch = {"rank0": None, "zeros": [], "rank1": set(), "scrapes": 0}
        cls.watcher = threading.Thread(target=cls.watch_workers, daemon=True)
        cls.watcher.start()

    @classmethod
    def watch_workers(cls):
        """While the training runs, every 200 ms: rank 0's scrape (the last one with its
        evaluation kept in watch["rank0"]), any evaluation series it showed at 0, and the
        evaluation families rank 1 ever showed."""
        w = cls.watch
        while cls.train.running():
            try:
                text0, text1 = get(cls.wbase)[2], get(cls.wbase + 1)[2]
            except OSError:   # URLError among them: a rank exited, the training ends
                break
            types0, samples0 = parse(text0)
            types1 = parse(text1)[0]
            w["scrapes"] += 1
            w["zeros"] += [(n, lab) for n, lab, v in samples0 if n in EVALS and v == 0]
            if len({n for n, _, _ in samples0 if n in EVALS}) == 3:
                w["rank0"] = text0
            w["rank1"] |= set(EVALS) & set(types1)
            if not set(EVALS) <= set(types0):
                w["zeros"].append(("families missing on rank 0", sorted(types0)))
            time.sleep(0.2)

    def test_a_format_and_families(self):
        want = {self.base: ["tessera_map_epoch", "tessera_members", "tessera_jobs",
                            "tessera_rpc_requests_total", "tessera_rpc_duration_seconds",
                            "tessera_shard_failures_total", "tessera_lease_expiries_total",
                            "tessera_shards_away_total"],
                self.base + 1: ["tessera_shard_push_seconds", "tessera_shard_pull_seconds",
                                "tessera_shard_push_bytes_total", "tessera_shard_updates_total",
                                "tessera_shard_partitions", "tessera_shard_promotions_total",
                                "tessera_shard_aggregate_seconds"],
                self.wbase: ["tessera_worker_steps_total", "tessera_worker_step_seconds",
                             "tessera_worker_exchange_seconds",
                             "tessera_worker_push_bytes_total",
                             "tessera_worker_failovers_total"]}
        tl.wait_until(lambda: value(parse(get(self.base + 1)[2])[1],
                                    "tessera_shard_push_seconds_count") > 0, 60, "pushes")
        for port in self.ports:
            code, headers, text = get(port)
            self.assertEqual(code, 200, port)
            self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
            types, samples = parse(text)
            check_histograms(types, samples)
            for fam in want.get(port, []):
                self.assertIn(fam, types, "port %d" % port)
        _, samples = parse(get(self.base)[2])
        self.assertGreater(value(samples, "tessera_rpc_requests_total",
                                 'method="tessera.v1.Master/Heartbeat",code="OK"'), 0)
        self.assertEqual(value(samples, "tessera_members", 'kind="shard",state="alive"'), 2)
        self.assertEqual(value(samples, "tessera_lease_expiries_total"), 0)
        # every update a shard applied was aggregated once (a shard may not have completed
        # a step yet when the other has: wait for one)
        for port in (self.base + 1, self.base + 2):
            tl.wait_until(lambda: value(parse(get(port)[2])[1],
                                        "tessera_shard_aggregate_seconds_count") > 0, 60,
                          "an aggregation on port %d" % port)
            _, samples = parse(get(port)[2])
            updates = value(samples, "tessera_shard_updates_total")
            aggregated = value(samples, "tessera_shard_aggregate_seconds_count")
            self.assertLessEqual(abs(aggregated - updates), 64, (port, aggregated, updates))

    def test_aa_endpoints_listen_on_loopback_unless_told(self):
        outside = outside_address()
        if not outside:
            print("skipped: this machine has no IPv4 address but loopback, so no address "
                  "to find the endpoints closed on")
            self.skipTest("no non-loopback IPv4 address")
        # the master and the shards listen for gRPC on 127.0.0.1, the workers serve none:
        # /metrics is on 127.0.0.1 alone (the workers' only while they run)
        ports = self.ports if self.train.running() else self.ports[:3]
        for port in ports:
            self.assertTrue(connects("127.0.0.1", port), port)
            self.assertFalse(connects(outside, port), "%s:%d answers" % (outside, port))
        mport = tl.free_port()
        m = self.c.start_master(name="master-any", extra=[
            "--metrics-port", str(mport), "--metrics-listen", "0.0.0.0"])
        try:
            # its port file says gRPC is up; /metrics may come a moment later (it failed
            # once under a loaded make test with "connection refused")
            tl.wait_until(lambda: connects(outside, mport), 10,
                          "the master's /metrics on %s:%d" % (outside, mport))
            with urllib.request.urlopen("http://%s:%d/metrics" % (outside, mport),
                                        timeout=10) as r:
                self.assertEqual(r.status, 200)
                self.assertIn("tessera_map_epoch", r.read().decode())
        finally:
            m.stop()
        tl.log("%d endpoints closed on %s, open on 127.0.0.1; --metrics-listen 0.0.0.0 "
               "open on %s" % (len(ports), outside, outside))

    def test_b_steps_rise_and_scrapes_never_block_them(self):
        stop, scrapes = threading.Event(), [0]

        def hammer():
            while not stop.is_set():
                if get(self.base + 1)[0] == 200 and get(self.wbase)[0] == 200:
                    scrapes[0] += 1
                time.sleep(0.1)
        th = threading.Thread(target=hammer)
        th.start()
        try:
            first = value(parse(get(self.wbase)[2])[1], "tessera_worker_steps_total")
            time.sleep(2)
            second = value(parse(get(self.wbase)[2])[1], "tessera_worker_steps_total")
        finally:
            stop.set()
            th.join()
        self.assertGreater(second, first, "steps rose while scraped every 100 ms")
        self.assertGreater(scrapes[0], 5)
        tl.log("steps %d -> %d in 2 s, %d scrape pairs beside" % (first, second, scrapes[0]))

    def test_c_prometheus_scrapes_and_answers_promql(self):
        query = tl.start_prometheus(self.c, self.ports)

        steps = 'sum(tessera_worker_steps_total{job="tessera"})'
        first = tl.wait_until(lambda: query(steps), 60, "Prometheus to scrape the workers")
        tl.wait_until(lambda: (query(steps) or [0])[0] > first[0], 30, "the steps to rise")
        p99 = tl.wait_until(lambda: [v for v in query(
            "histogram_quantile(0.99, sum by (le) (rate(tessera_shard_push_seconds_bucket[5s])))")
            or [] if v == v], 30, "a push-latency p99")
        self.assertGreater(p99[0], 0)
        up = query("sum(up)")
        self.assertEqual(up, [float(len(self.ports))], "every target up")
        tl.log("Prometheus: steps %d -> rising; shard push p99 %.2f ms" % (first[0],
                                                                           p99[0] * 1000))

    def test_da_train_metrics_listen_needs_a_port(self):
        r = tl.run_cli(["train", "--local", "--steps", "5", "--metrics-listen", "0.0.0.0"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("give --metrics-port BASE too", r.stderr)

    def test_d_bad_requests_and_the_service_goes_on(self):
        code, headers, _ = get(self.base, method="POST")
        self.assertEqual(code, 405)
        self.assertIn("GET", headers.get("Allow", ""))
        self.assertEqual(get(self.base, "/nope")[0], 404)
        self.assertEqual(get(self.base, headers={"X-Big": "a" * 40000})[0], 431)
        self.assertEqual(get(self.base)[0], 200)

    def test_f_status_page_in_a_headless_browser(self):
        url = "http://127.0.0.1:%d/" % self.base
        self.assertIn("status page %s\n" % url, self.up.head, "tessera up prints the page's URL")
        code, headers, html = get(self.base, "/")
        self.assertEqual(code, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        self.assertIsNone(re.search(r'(src|href)="?(https?:)?//', html), "nothing fetched "
                          "from elsewhere")

        def points():
            doc = json.loads(get(self.base, "/api/status")[2])
            job = [j for j in doc["jobs"] if j["id"] == "metrics"]
            return job and len(job[0]["points"]) >= 3 and doc
        doc = tl.wait_until(points, 60, "3 progress points of the job")
        self.assertEqual([s["state"] for s in doc["shards"]], ["alive", "alive"])
        # the shards' own status (pid, chains, bytes), asked by the master's thread once the
        # page is watched: the same figures `tessera status --json` gets from each shard
        doc = tl.wait_until(lambda: (lambda d: all("heads" in s for s in d["shards"]) and d)(
            json.loads(get(self.base, "/api/status")[2])), 20, "the shards' own status")
        cli = json.loads(tl.run_cli(["status", "--master", self.master, "--json"]).stdout)
        for page_s, cli_s in zip(doc["shards"], cli["shards"]):
            for k in ("id", "pid", "heads", "follows"):
                self.assertEqual(page_s[k], cli_s[k], k)
            self.assertGreater(page_s["bytes"], 0)
            self.assertLess(page_s["view_s_ago"], 5)
        self.assertGreater(sum(s["heads"] for s in doc["shards"]), 0)
        loss = [p[1] for p in [j for j in doc["jobs"] if j["id"] == "metrics"][0]["points"]]
        self.assertTrue(all(0 < v < 10 for v in loss), loss)
        self.assertEqual(sorted((w["job"], w["rank"]) for w in doc["workers"]),
                         [("metrics", 0), ("metrics", 1)])
        self.assertTrue(self.train.running(), "the training ended before the page could show "
                        "its workers alive (SLOW_MS too short for this machine?)")
        dom = self.dump_dom()
        self.assertEqual(dom.count('<tr class="shard">'), 2, dom[-3000:])
        self.assertEqual(sorted(re.findall(r'<tr class="worker">.*?<td class="job">([^<]*)'
                                           r'</td><td>(\d+)</td><td class="alive">', dom)),
                         [("metrics", "0"), ("metrics", "1")], "live workers with their job")
        self.assertIn('<details id="departed" hidden="">', dom, "no departed worker: folded "
                      "away")
        roles = re.findall(r'<td class="roles">(\d+)/(\d+)</td>', dom)
        self.assertEqual(roles, [(str(s["heads"]), str(s["follows"])) for s in doc["shards"]])
        self.assertIn("<td>metrics</td>", dom)
        lines = re.findall(r'<polyline points="([^"]*)"', dom)
        self.assertTrue(lines and len(lines[0].split()) >= 3, "a loss plot with points")
        shot = os.path.join(ARTIFACTS, "status-page.png")
        os.makedirs(ARTIFACTS, exist_ok=True)
        argv, env = self.chromium()
        subprocess.run(argv + ["--screenshot=" + shot, url], capture_output=True, timeout=120,
                       env=env)
        self.assertGreater(os.path.getsize(shot), 10000)
        tl.log("status page: 2 shard rows, a loss plot of %d points; screenshot %s" %
               (len(lines[0].split()), shot))

    def chromium(self):
        """Headless Chromium's argv (without the URL and what to do) and environment."""
        chromium = shutil.which("chromium")
        self.assertIsNotNone(chromium, "chromium (Debian's package, in make deps)")
        profile = os.path.join(self.c.dir, "chromium")
        return ([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--user-data-dir=" + profile, "--virtual-time-budget=3000",
                 "--window-size=1200,1100"], dict(os.environ, HOME=profile))

    def dump_dom(self):
        """The status page's DOM once its script has drawn it."""
        argv, env = self.chromium()
        return subprocess.run(argv + ["--dump-dom", "http://127.0.0.1:%d/" % self.base],
                              capture_output=True, text=True, timeout=120, env=env).stdout

    def test_z_training_ends(self):
        self.assertEqual(self.train.wait(300), 0, self.train.log_text()[-2000:])

    def test_za_only_rank0_exported_its_evaluation(self):
        self.watcher.join(30)
        w = self.watch
        self.assertGreater(w["scrapes"], 10)
        self.assertEqual(w["zeros"], [], "rank 0: no evaluation series before a value")
        self.assertIsNotNone(w["rank0"], "rank 0 evaluated during the training")
        got = {n: (lab, v) for n, lab, v in parse(w["rank0"])[1] if n in EVALS}
        self.assertTrue(all('job_id="metrics",rank="0"' in lab for lab, _ in got.values()), got)
        self.assertLess(got["tessera_worker_loss"][1], 10)
        self.assertLessEqual(got["tessera_worker_test_accuracy"][1], 1)
        self.assertEqual(w["rank1"], set(), "rank 1 does not evaluate")
        tl.log("%d scrapes of both ranks: rank 0's evaluation %s, never a 0 before it; rank 1 "
               "exported none" % (w["scrapes"], {n: v for n, (_, v) in got.items()}))

    def test_zb_dashboard_names_exported_metrics_with_legends_and_variables(self):
        labels = {}
        for port in self.ports[:3]:
            for fam, names in family_labels(parse(get(port)[2])[1]).items():
                labels.setdefault(fam, set()).update(names)
        self.watcher.join(30)   # the workers' families: rank 0's after its evaluation
        self.assertIsNotNone(self.watch["rank0"])
        for fam, names in family_labels(parse(self.watch["rank0"])[1]).items():
            labels.setdefault(fam, set()).update(names)
        with open(os.path.join(tl.SRC, "deploy", "grafana", "tessera.json")) as f:
            dash = json.load(f)
        targets = [t for p in dash["panels"] for t in p["targets"]]
        self.assertGreater(len(targets), 10)
        self.assertEqual(dashboard_problems(dash, labels), [])
        # the check refuses what it is there for
        broken = json.loads(json.dumps(dash))
        del broken["panels"][0]["targets"][0]["legendFormat"]
        broken["panels"][1]["targets"][0]["expr"] = broken["panels"][1]["targets"][0][
            "expr"].replace('job_id=~"$job_id",', "")
        broken["panels"][2]["targets"][0]["legendFormat"] = "p99"
        broken["templating"]["list"] = [v for v in broken["templating"]["list"]
                                        if v["name"] != "instance"]
        found = "\n".join(dashboard_problems(broken, labels))
        for want in ("no legendFormat", "not filtered by $job_id", "does not name ['job_id']",
                     "variable instance"):
            self.assertIn(want, found)
        tl.log("dashboard: %d targets, each with a legend; variables job_id and instance" %
               len(targets))

    def test_zz_a_snapshot_is_counted(self):
        with self.c.admin_env():   # CreateSnapshot is an admin call
            r = tl.run_cli(["snapshot", "create", "--master", self.master, "--job", "metrics"],
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        _, samples = parse(get(self.base)[2])
        self.assertEqual(value(samples, "tessera_snapshots_total", 'result="ok"'), 1)
        self.assertEqual(value(samples, "tessera_snapshot_seconds_count"), 1)
        self.assertGreater(value(samples, "tessera_snapshot_bytes_total"), 0)

    def test_zz_b_departed_workers_fold(self):
        tl.wait_until(lambda: all(w["state"] != "alive" for w in json.loads(
            get(self.base, "/api/status")[2])["workers"]), 30, "the workers to leave")
        dom = self.dump_dom()
        self.assertNotIn('<tr class="worker">', dom, "no live worker listed")
        m = re.search(r'<details id="departed"( [^>]*)?><summary>([^<]*)</summary>', dom)
        self.assertIsNotNone(m, dom[-3000:])
        self.assertNotIn("hidden", m.group(1) or "")
        self.assertNotIn("open", m.group(1) or "", "folded: closed until clicked")
        self.assertEqual(m.group(2), "2 departed: 2 left")
        self.assertEqual(re.findall(r'<tr class="departed">.*?<td class="job">([^<]*)</td>',
                                    dom), ["metrics", "metrics"])
        tl.log("status page after the training: %s, folded" % m.group(2))


if __name__ == "__main__":
    tl.main()
