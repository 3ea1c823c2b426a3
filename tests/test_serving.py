"""Serving safely (deffcore.inputs.serving): localhost binding, local-path policy,
uploads."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from deffcore.core.errors import DeffError, UnknownDatasetError
from deffcore.inputs import serving
from deffcore.inputs.serving import LocalPathRefusedError, check_local_path, check_model_spec

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# policy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "on", "ON"])
def test_default_allows_any_path(monkeypatch, tmp_path, value):
    if value is None:
        monkeypatch.delenv(serving.ENV, raising=False)
    else:
        monkeypatch.setenv(serving.ENV, value)
    assert serving.local_path_policy().mode == "on"
    assert check_local_path(tmp_path / "x.txt") == tmp_path / "x.txt"


def test_off_refuses_every_path_with_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv(serving.ENV, "off")
    real = tmp_path / "real.txt"
    real.write_text("secret")
    messages = []
    for p in (real, tmp_path / "missing.txt"):
        with pytest.raises(LocalPathRefusedError) as err:
            check_local_path(p, what="dataset file")
        messages.append(str(err.value))
    assert messages[0] == messages[1]  # nothing about existence, not even the path
    assert "DEFF_LOCAL_PATHS=off" in messages[0]
    assert isinstance(err.value, DeffError)


def test_folder_confines_paths_and_hides_existence(monkeypatch, tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (allowed / "ok.txt").write_text("fine")
    (allowed / "link.txt").symlink_to(outside / "secret.txt")
    monkeypatch.setenv(serving.ENV, str(allowed))
    policy = serving.local_path_policy()
    assert policy.mode == "folder" and policy.folder == allowed.resolve()

    assert check_local_path(allowed / "ok.txt") == (allowed / "ok.txt").resolve()
    assert check_local_path("ok.txt") == (allowed / "ok.txt").resolve()  # relative: inside
    assert check_local_path(allowed / "not-yet.txt").parent == allowed.resolve()

    def refused(p: str) -> str:
        with pytest.raises(LocalPathRefusedError) as err:
            check_local_path(p)
        return str(err.value).replace(repr(p), "<p>")

    existing = refused(str(outside / "secret.txt"))
    missing = refused(str(outside / "nothing.txt"))
    assert existing == missing  # the same sentence whether or not the file exists
    assert "secret" not in existing
    refused(str(allowed / ".." / "outside" / "secret.txt"))  # `..` escapes are refused
    refused(str(allowed / "link.txt"))  # a symlink pointing out is refused
    refused("/etc/passwd")


def test_a_sibling_folder_whose_name_starts_like_the_allowed_one_is_outside(monkeypatch, tmp_path):
    """Containment is by path parts, not by string prefix: `/srv/data-private` and
    `/srv/database` are not inside `/srv/data` (a surviving mutation)."""
    allowed = tmp_path / "data"
    allowed.mkdir()
    for sibling in ("data-private", "database", "data.bak"):
        (tmp_path / sibling).mkdir()
        (tmp_path / sibling / "secret.txt").write_text("secret")
    monkeypatch.setenv(serving.ENV, str(allowed))
    for sibling in ("data-private", "database", "data.bak"):
        with pytest.raises(LocalPathRefusedError):
            check_local_path(tmp_path / sibling / "secret.txt")
        with pytest.raises(LocalPathRefusedError):
            check_local_path(f"../{sibling}/secret.txt")  # relative to the allowed folder
    assert check_local_path(allowed) == allowed.resolve()  # the folder itself is inside
    assert check_local_path(allowed / "sub" / "x.txt").parent.parent == allowed.resolve()


@pytest.mark.parametrize("value", ["relative/folder", "/no/such/folder/anywhere"])
def test_unusable_folder_setting_switches_paths_off(monkeypatch, value):
    monkeypatch.setenv(serving.ENV, value)
    assert serving.local_path_policy().mode == "off"


def test_model_specs_under_a_policy(monkeypatch, tmp_path):
    monkeypatch.setenv(serving.ENV, "off")
    for spec in ("smollm2-135m", "tiny-llama", "random:tiny-llama:3", "EleutherAI/pythia-70m"):
        assert check_model_spec(spec) == spec
    for spec in (str(tmp_path), "/models/x", "~/m.gguf", "random:/models/x:1", "./m"):
        with pytest.raises(LocalPathRefusedError):
            check_model_spec(spec)
    monkeypatch.setenv(serving.ENV, str(tmp_path))
    assert check_model_spec(str(tmp_path / "model")) == str(tmp_path / "model")
    with pytest.raises(LocalPathRefusedError):
        check_model_spec("/models/x")


# ---------------------------------------------------------------------------------------------
# one resolved path: what is checked is what gets opened
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def server_cwd(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(the server's working directory holding leak.csv/relmodel/, the allowed folder)."""
    cwd, allowed = tmp_path / "cwd", tmp_path / "allowed"
    cwd.mkdir()
    allowed.mkdir()
    (cwd / "leak.csv").write_text("SECRET_HEADER\nsecret\n")
    (cwd / "relmodel").mkdir()
    (cwd / "hfdir").mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv(serving.ENV, str(allowed))
    return cwd, allowed.resolve()


def test_a_relative_model_path_comes_back_resolved_inside_the_folder(server_cwd):
    cwd, allowed = server_cwd
    assert check_model_spec("relmodel") == str(allowed / "relmodel")  # never cwd/relmodel
    assert check_model_spec("random:relmodel:3") == f"random:{allowed / 'relmodel'}:3"
    (allowed / "mine").mkdir()  # a bare name that exists only in the allowed folder is local
    assert check_model_spec("mine") == str(allowed / "mine")
    (allowed / "link").symlink_to(allowed / "mine")
    assert check_model_spec(str(allowed / "link")) == str(allowed / "mine")  # links resolved
    assert check_model_spec("org/name") == "org/name"  # a hub id is left alone
    with pytest.raises(LocalPathRefusedError):
        check_model_spec(str(cwd / "relmodel"))


def test_a_relative_dataset_path_comes_back_resolved_and_never_opens_the_cwd(server_cwd):
    from deffcore.inputs.texts import check_dataset

    _, allowed = server_cwd
    spec = serving.check_dataset_spec("leak.csv:text", "leak.csv")
    assert spec == f"{allowed / 'leak.csv'}:text"
    with pytest.raises(UnknownDatasetError) as err:
        check_dataset(spec)  # the allowed folder has no leak.csv: the cwd's is never read
    assert "SECRET" not in str(err.value) and str(allowed) in str(err.value)
    assert serving.check_dataset_spec("bbc-news") == "bbc-news"


def test_with_paths_on_specs_come_back_as_given(monkeypatch, tmp_path):
    monkeypatch.delenv(serving.ENV, raising=False)
    assert check_model_spec("./relmodel") == "./relmodel"
    assert serving.check_dataset_spec("data.csv:body", "data.csv") == "data.csv:body"
    assert serving.check_dataset_spec("hf:/some/dir:train") == "hf:/some/dir:train"


def test_paths_off_refuses_hf_specs_that_name_this_machine(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hfdir").mkdir()
    monkeypatch.setenv(serving.ENV, "off")
    for spec in ("hf:/some/dir:train", "hf:./x:train", "hf:~/x:train", "hf:hfdir:train",
                 f"hf:{tmp_path}:train:text", "hf:a/b/c:train", "hf:csv:train",
                 "hf:json:train", "hf:text:train", "hf:x.gguf:train"):  # fmt: skip
        with pytest.raises(LocalPathRefusedError):
            serving.check_dataset_spec(spec)
    for spec in ("hf:Salesforce/wikitext:wikitext-103-raw-v1:train", "hf:org/name:train"):
        assert serving.check_dataset_spec(spec) == spec


def test_a_folder_policy_resolves_an_hf_folder_inside_it(server_cwd):
    _, allowed = server_cwd
    (allowed / "hfdir").mkdir()
    assert serving.check_dataset_spec("hf:hfdir:train:body") == f"hf:{allowed / 'hfdir'}:train:body"
    with pytest.raises(LocalPathRefusedError):
        serving.check_dataset_spec("hf:/etc:train")
    with pytest.raises(LocalPathRefusedError, match="file readers"):
        serving.check_dataset_spec("hf:parquet:train")


# ---------------------------------------------------------------------------------------------
# uploads
# ---------------------------------------------------------------------------------------------


def test_upload_checks_name_the_users_file():
    serving.check_upload("passages.txt", b"one\n\ntwo\n")
    serving.check_upload("table.parquet", b"PAR1\x00\x01binary is fine here")
    for data in (b"", b"  \n\n "):
        with pytest.raises(UnknownDatasetError, match=r"passages\.txt is empty"):
            serving.check_upload("passages.txt", data)
    for name, data in (
        ("a.txt", b"ab\x00cd"),
        ("b.csv", b"\xff\xfe\x00t"),
        ("c.jsonl", b"\x89PNG"),
    ):
        with pytest.raises(UnknownDatasetError, match=f"{re.escape(name)} is not UTF-8 text"):
            serving.check_upload(name, data)


# ---------------------------------------------------------------------------------------------
# the server binds to localhost
# ---------------------------------------------------------------------------------------------


def test_config_binds_to_localhost():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "localhost"


def _listening(port: int) -> list[str]:
    """Local addresses of sockets LISTENing on `port` (Linux /proc/net/tcp{,6})."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            addr, state = fields[1], fields[3]
            host, _, hexport = addr.rpartition(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A = LISTEN
                found.append(host)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux /proc/net/tcp")
def test_streamlit_run_listens_on_loopback_only(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DEFF_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)],
        cwd=REPO,  # .streamlit/config.toml is read from here
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while not _listening(port) and time.monotonic() < deadline:
            assert proc.poll() is None, "streamlit exited"
            time.sleep(0.3)
        hosts = _listening(port)
        assert hosts, "streamlit never listened"
        loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1
        assert set(hosts) <= loopback, hosts  # never 0.0.0.0 / :: (every interface)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
