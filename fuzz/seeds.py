#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from the AdmissionReviews
of tests/data and the rows of the unit test tables (valid and invalid variants of each rule).
Run from the repository root; the output is committed. Seeds the fuzzer found interesting
(crashes, once fixed) are added by hand as `regression-*` files and are not touched here."""

import copy
import json
import os
import subprocess
import tempfile

DATA = "tests/data"
OUT = "fuzz/corpus"


def load(name):
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


def write(target, name, content):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(content, (dict, list)):
        content = json.dumps(content, separators=(",", ":"))
    if isinstance(content, str):
        content = content.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(content)


def update(review, old, new, sub=None):
    r = copy.deepcopy(review)
    r["request"]["operation"] = "UPDATE"
    r["request"]["oldObject"] = old
    r["request"]["object"] = new
    if sub:
        r["request"]["subResource"] = sub
    return r


def delete(review, old):
    r = copy.deepcopy(review)
    r["request"]["operation"] = "DELETE"
    r["request"]["oldObject"] = old
    r["request"]["object"] = None
    return r


def eviction_requests():
    base = load("evictionrequest-create.json")
    write("eviction_requests", "create-e3", base)
    obj = base["request"]["object"]
    uid = obj["spec"]["target"]["pod"]["uid"]
    good = copy.deepcopy(obj)
    good["metadata"]["name"] = uid
    r = copy.deepcopy(base)
    r["request"]["object"] = good
    r["request"]["name"] = uid
    write("eviction_requests", "create-valid", r)
    gen = copy.deepcopy(r)
    gen["request"]["object"]["metadata"]["generateName"] = "x-"
    write("eviction_requests", "create-e1", gen)
    bad = copy.deepcopy(r)
    bad["request"]["object"]["spec"]["requesters"] = [{"name": "nodots"}, {"name": "nodots"}]
    bad["request"]["object"]["spec"]["heartbeatDeadlineSeconds"] = 5
    write("eviction_requests", "create-e4-e5", bad)
    changed = copy.deepcopy(good)
    changed["spec"]["requesters"] = []
    write("eviction_requests", "update-u2", update(r, good, changed))
    moved = copy.deepcopy(good)
    moved["spec"]["target"]["pod"]["name"] = "other"
    write("eviction_requests", "update-u1", update(r, good, moved))
    t = "2026-01-01T00:00:00Z"
    names = ["a.example.com", "b.example.com", "imperative-eviction.k8s.io"]
    init = copy.deepcopy(good)
    init["status"] = {
        "targetInterceptors": [{"name": n} for n in names],
        "interceptors": [{"name": n} for n in names],
    }
    write("eviction_requests", "status-s1-init", update(r, good, init, "status"))
    active = copy.deepcopy(init)
    active["status"]["activeInterceptors"] = ["a.example.com"]
    active["status"]["interceptors"][0]["activationTime"] = t
    write("eviction_requests", "status-s2-activate", update(r, init, active, "status"))
    beat = copy.deepcopy(active)
    beat["status"]["interceptors"][0].update({"startTime": t, "heartbeatTime": t})
    write("eviction_requests", "status-s4-heartbeat", update(r, active, beat, "status"))
    done = copy.deepcopy(beat)
    done["status"]["interceptors"][0]["completionTime"] = t
    done["status"]["processedInterceptors"] = ["a.example.com"]
    done["status"]["activeInterceptors"] = ["b.example.com"]
    done["status"]["interceptors"][1]["activationTime"] = t
    write("eviction_requests", "status-s2-handoff", update(r, beat, done, "status"))
    back = copy.deepcopy(done)
    back["status"]["processedInterceptors"] = []
    back["status"]["conditions"] = [{"type": "Evicted", "status": "True", "reason": "PodDeleted",
                                     "message": "", "lastTransitionTime": t}]
    write("eviction_requests", "status-s3-s5", update(r, done, back, "status"))
    forbid = copy.deepcopy(beat)
    forbid["status"]["evictionRequestCancellationPolicy"] = "Forbid"
    forbid["status"]["podEvictionStatus"] = {"failedAPIEvictionCounter": 3}
    write("eviction_requests", "status-s6", update(r, beat, forbid, "status"))
    write("eviction_requests", "delete-d2", delete(r, forbid))
    write("eviction_requests", "not-json", b'{"kind":"AdmissionReview"')


def pods():
    base = load("pod-create-annotated.json")
    write("pods", "create-p2", base)
    ann = "evictord.dev/eviction-interceptors"
    for name, value in [
        ("create-valid", "checkout.shop.example.com, pdb.example.com"),
        ("create-p3-duplicate", "a.example.com,a.example.com"),
        ("create-p5-imperative", "imperative-eviction.k8s.io"),
        ("create-p6-k8s-io", "x.k8s.io,deployment.apps.k8s.io"),
        ("create-p4-many", ",".join(f"i{i}.example.com" for i in range(17))),
        ("create-p1-empty", " , "),
    ]:
        r = copy.deepcopy(base)
        r["request"]["object"]["metadata"]["annotations"][ann] = value
        write("pods", name, r)
    old = copy.deepcopy(base["request"]["object"])
    old["metadata"]["annotations"][ann] = "a.example.com"
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][ann] = "b.example.com"
    write("pods", "update-p7", update(base, old, new))


def node_maintenances():
    base = load("nodemaintenance-create.json")
    for target in ["validate_node_maintenances", "mutate_node_maintenances"]:
        write(target, "create-partial-plan", base)
        obj = base["request"]["object"]
        staged = copy.deepcopy(obj)
        staged["spec"]["stage"] = "Drain"
        staged["spec"]["drainPlan"] = list(reversed(staged["spec"].get("drainPlan", [])))
        r = copy.deepcopy(base)
        r["request"]["object"] = staged
        write(target, "create-misordered", r)
        sel = copy.deepcopy(obj)
        sel["spec"]["drainPlan"] = [
            {"podPriority": 5, "podType": "Default",
             "podSelector": {"matchLabels": {"app": "web"},
                             "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]}},
            {"podPriority": 5, "podType": "Default"},
        ]
        sel["spec"]["nodeSelector"] = {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["a"]}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}
        r = copy.deepcopy(base)
        r["request"]["object"] = sel
        write(target, "create-selectors", r)
        later = copy.deepcopy(staged)
        later["spec"]["stage"] = "Idle"
        write(target, "update-n4-backwards", update(base, staged, later))
        write(target, "delete", delete(base, staged))


def pod_evictions():
    base = load("pod-eviction-create.json")
    write("pod_evictions", "create", base)
    dry = copy.deepcopy(base)
    dry["request"]["dryRun"] = True
    write("pod_evictions", "dry-run", dry)
    v1 = copy.deepcopy(base)
    v1["request"]["object"] = {"apiVersion": "policy/v1", "kind": "Eviction",
                               "metadata": {"name": base["request"]["name"], "namespace": "shop",
                                            "annotations": {"evictord.dev/imperative-eviction": "9a8d3e5c"}},
                               "deleteOptions": {"dryRun": ["All"]}}
    write("pod_evictions", "v1-imperative-dry-run", v1)
    other = copy.deepcopy(base)
    other["request"]["subResource"] = "status"
    write("pod_evictions", "wrong-subresource", other)


def selectors():
    label_cases = [
        {"selector": {}, "labels": {"app": "web"}},
        {"selector": {"matchLabels": {"app": "web"}}, "labels": {"app": "web", "x": "y"}},
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db", "cache"]}]},
         "labels": {"tier": "db"}},
        {"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]},
                                           {"key": "app", "operator": "Exists"},
                                           {"key": "gone", "operator": "DoesNotExist"}]},
         "labels": {"app": "x"}},
        {"selector": {"matchExpressions": [{"key": "bad key!", "operator": "Gt", "values": ["1"]}]},
         "labels": {}},
    ]
    for i, c in enumerate(label_cases):
        write("label_selectors", f"case-{i}", c)
    node_cases = [
        {"selector": {"nodeSelectorTerms": []}, "name": "a"},
        {"selector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node-role.kubernetes.io/worker", "operator": "Exists"}]}]},
         "name": "a", "labels": {"node-role.kubernetes.io/worker": ""}},
        {"selector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}, "name": "b"},
        {"selector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "cpu", "operator": "Gt", "values": ["4"]},
            {"key": "mem", "operator": "Lt", "values": ["x"]}]}]},
         "name": "c", "labels": {"cpu": "8", "mem": "3"}},
        {"selector": {"nodeSelectorTerms": [{}]}, "name": "d"},
    ]
    for i, c in enumerate(node_cases):
        write("node_selectors", f"case-{i}", c)


def texts():
    for i, d in enumerate(["90s", "20m", "1h30m", "8760h", "1000s", "0s", "1y 2months", "5 minutes",
                           "100ms", "-1s", "99999999999999999999h"]):
        write("durations", f"case-{i}", d)
    for i, l in enumerate([
        "a.example.com,b.example.com",
        " a.example.com , , b.example.com ",
        "imperative-eviction.k8s.io",
        "deployment.apps.k8s.io,x.k8s.io,k8s.io",
        ",".join(f"i{i}.example.com" for i in range(20)),
        "a.example.com,a.example.com,A.example.com,-a.example.com",
    ]):
        write("interceptor_lists", f"case-{i}", l)


def certificates():
    with tempfile.TemporaryDirectory() as d:
        def run(*args):
            subprocess.run(args, cwd=d, check=True, capture_output=True)
        run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=evictord-ca", "-days", "3650")
        run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=evictord")
        run("openssl", "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "tls.crt", "-days", "365")
        parts = {n: open(os.path.join(d, n), "rb").read() for n in ["ca.crt", "tls.crt", "tls.key", "ca.key"]}
    z = b"\0"
    write("certificates", "valid", z.join([parts["ca.crt"], parts["tls.crt"], parts["tls.key"], parts["ca.key"]]))
    write("certificates", "key-mismatch", z.join([parts["ca.crt"], parts["tls.crt"], parts["ca.key"]]))
    write("certificates", "truncated", z.join([parts["ca.crt"], parts["tls.crt"][:200], parts["tls.key"]]))
    write("certificates", "missing-key", z.join([parts["ca.crt"], parts["tls.crt"]]))


if __name__ == "__main__":
    eviction_requests()
    pods()
    node_maintenances()
    pod_evictions()
    selectors()
    texts()
    certificates()
