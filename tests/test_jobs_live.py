"""Live estimates in background runs (deffcore.work.jobs, issue 23): the job's status holds them,
"stop when settled" keeps a run of that N, documents runs have none."""

from __future__ import annotations

from deffcore.extraction import cache
from deffcore.inputs.run_spec import RunSpec
from deffcore.work import jobs


def _spec(dataset: str, n: int, passages: str = "windows") -> RunSpec:
    return RunSpec(
        model="tiny-llama",
        revision=None,
        dataset=dataset,
        n=n,
        max_tokens=16,
        seed=0,
        dtype="float32",
        passages=passages,
    )


def test_a_window_job_keeps_its_estimates(windows_dataset, every_batch):
    spec = _spec(windows_dataset, 256)
    st = jobs.wait(jobs.start(spec, device="cpu", batch_size=32), timeout=600)
    assert st.state == "done", st.error
    assert [e["n"] for e in st.estimates] == [64, 128]  # the landed run itself is the page's
    assert set(st.estimates[0]["poolings"]) >= {"default", "top1_pc"}
    assert st.stopped_at is None and st.result_key == spec.key()


def test_stop_when_settled_keeps_a_run_of_that_n(windows_dataset, every_batch, planted):
    # the planted model's verdict first settles at 256 (with the 1.5/sqrt(N) spread prior), and
    # the rule wants it at two marks in a row below N: a 1,024-run stops at 512
    spec = _spec(windows_dataset, 1024)
    job_id = jobs.start(spec, device="cpu", batch_size=32)
    assert jobs.stop_when_settled(job_id, "verdict")
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "done", st.error
    assert st.until == "verdict" and st.stopped_at is not None and st.stopped_at < 1024
    assert st.estimates[-1]["n"] == st.stopped_at and st.estimates[-1]["verdict_settled"]
    kept = jobs.load_result(st.result_key)
    assert kept.n == st.stopped_at and kept.spec.n == st.stopped_at
    assert cache.load(spec) is None  # no 1,024-run, complete or partial
    assert not jobs.stop_when_settled(job_id)  # finished


def test_documents_jobs_have_no_estimates_and_cannot_stop_early(tiny_dataset):
    spec = _spec(tiny_dataset, 8, passages="documents")
    job_id = jobs.start(spec, device="cpu", batch_size=4)
    assert not jobs.stop_when_settled(job_id)
    st = jobs.wait(job_id, timeout=600)
    assert st.state == "done" and st.estimates == () and st.until is None
