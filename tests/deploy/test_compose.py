"""docker-compose.yml agrees with the code it deploys (Docker itself cannot run here).

Every build context and Dockerfile exists and copies files that exist; every mounted file
exists; every ``replayscope`` command parses with the real CLI parser; ports agree with
``--port`` and the health checks; every ``REPLAYSCOPE_*`` variable is a real setting or a
runner flag's variable; Prometheus scrapes the services compose names, loads rules that
exist, and passes ``promtool check config``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from replayscope.app.cli import build_parser
from replayscope.collector.api.metrics import DECODE_STAGES_MATCHER
from replayscope.collector.settings import Settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict = COMPOSE["services"]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
PROMETHEUS = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*)|(:?\?)([^}]*))?\}")
REQUIRED = "required-value"


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with the environment unset: the default; a required
    ``${VAR:?message}`` (compose refuses to start without it): a stand-in value."""
    return _VAR.sub(lambda m: REQUIRED if m.group(4) else (m.group(3) or ""), str(value))


def argv(service: dict) -> list[str]:
    command = service.get("command", [])
    words = shlex.split(command) if isinstance(command, str) else list(command)
    return [interpolate(w) for w in words]


def replayscope_services() -> dict[str, dict]:
    return {name: s for name, s in SERVICES.items() if argv(s)[:1] == ["replayscope"]}


def option(words: list[str], flag: str) -> str | None:
    for i, word in enumerate(words):
        if word == flag:
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: interpolate(v) for k, v in env.items()}


def runner_flag_variables() -> set[str]:
    """REPLAYSCOPE_* variables the runner's flags read as defaults (app/cli/run.py, and the token
    through replayscope/contract/environment.py)."""
    source = (REPO / "app" / "cli" / "run.py").read_text()
    found = set(re.findall(r'os\.environ\.get\("(REPLAYSCOPE_[A-Z_]+)"\)', source))
    environment = (REPO / "replayscope" / "contract" / "environment.py").read_text()
    return found | set(re.findall(r'^[A-Z_]+_VARIABLE = "(REPLAYSCOPE_[A-Z_]+)"', environment, re.M))


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def built_services() -> dict[str, dict]:
    return {name: s for name, s in SERVICES.items() if "build" in s}


# -- images -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(built_services()))
def test_every_build_context_and_dockerfile_exists(name):
    build = SERVICES[name]["build"]
    context = REPO / build["context"]
    assert context.is_dir(), f"{name}: build context {context} is missing"
    assert (context / build["dockerfile"]).is_file(), f"{name}: {build['dockerfile']} is missing"


@pytest.mark.parametrize("dockerfile", sorted((REPO / "deploy" / "docker").glob("*.Dockerfile")),
                         ids=lambda p: p.name)
def test_every_file_a_dockerfile_copies_exists(dockerfile):
    copies = [rest for keyword, rest in dockerfile_instructions(dockerfile) if keyword in ("COPY", "ADD")]
    assert copies, "a replayscope image copies the package in"
    for rest in copies:
        words = [w for w in rest.split() if not w.startswith("--")]
        for source in words[:-1]:
            assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source}: not in the repository"
    # what pip installs from /src must be a complete package: every top-level package it lists
    copied = {w.strip("./") for rest in copies for w in rest.split()[:-1]}
    for package in ("replayscope", "runner", "collector", "app", "migrations", "pyproject.toml", "setup.py"):
        assert package in copied, f"{dockerfile.name} does not copy {package}"


def dockerignore_keeps(patterns: list[str], path: str) -> bool:
    """Whether a build context with these .dockerignore ``patterns`` holds ``path`` (Docker's rules:
    the last pattern that matches the path or a folder above it decides; ``!`` keeps; ``**`` is
    any number of folders, ``*`` and ``?`` stay within one)."""
    kept = True
    parts = path.split("/")
    for pattern in patterns:
        keep = pattern.startswith("!")
        body = pattern[1:] if keep else pattern
        regex = re.compile("".join(".*" if token == "**" else "[^/]*" if token == "*" else "[^/]" if token == "?"
                                   else re.escape(token) for token in re.split(r"(\*\*|\*|\?)", body.strip("/"))))
        if any(regex.fullmatch("/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            kept = keep
    return kept


def test_the_dockerignore_rules_understood_as_docker_reads_them():
    patterns = ["**", "!pyproject.toml", "!runner/**", "**/__pycache__"]
    assert dockerignore_keeps(patterns, "runner/trace/tracer.py")
    assert dockerignore_keeps(patterns, "pyproject.toml")
    assert not dockerignore_keeps(patterns, "replayscope/__init__.py")
    assert not dockerignore_keeps(patterns, "runner/trace/__pycache__/tracer.cpython-311.pyc")


@pytest.mark.parametrize("dockerfile", sorted((REPO / "deploy" / "docker").glob("*.Dockerfile")),
                         ids=lambda p: p.name)
def test_every_file_a_dockerfile_copies_is_in_its_build_context(dockerfile):
    """BuildKit reads ``<Dockerfile>.dockerignore``: a COPY of something it leaves out fails the build."""
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    patterns = [line.strip() for line in ignore.read_text().splitlines()
                if line.strip() and not line.startswith("#")] if ignore.exists() else []
    for rest in (rest for keyword, rest in dockerfile_instructions(dockerfile) if keyword == "COPY"):
        for source in [w for w in rest.split() if not w.startswith("--")][:-1]:
            root = REPO / source
            files = [root] if root.is_file() else [f for f in root.rglob("*.py") if "__pycache__" not in f.parts]
            assert files, f"{dockerfile.name}: COPY {source}: nothing to copy"
            for f in files:
                relative = f.relative_to(REPO).as_posix()
                assert dockerignore_keeps(patterns, relative), \
                    f"{dockerfile.name}: COPY {source}: {relative} is left out by {ignore.name}"


@pytest.mark.parametrize("dockerfile", sorted((REPO / "deploy" / "docker").glob("*.Dockerfile")),
                         ids=lambda p: p.name)
def test_a_dockerfile_cmd_is_a_valid_replayscope_command(dockerfile):
    import json

    cmds = [json.loads(rest) for keyword, rest in dockerfile_instructions(dockerfile) if keyword == "CMD"]
    assert cmds and cmds[-1][0] == "replayscope"
    build_parser().parse_args(cmds[-1][1:])


def test_the_images_are_the_documented_bases():
    collector = dockerfile_instructions(REPO / "deploy/docker/collector.Dockerfile")
    runner = dockerfile_instructions(REPO / "deploy/docker/runner.Dockerfile")
    assert ("FROM", "python:3.11-slim") in collector
    assert any(k == "RUN" and ".[postgres]" in r for k, r in collector)
    base = next(r for k, r in runner if k == "FROM")
    assert base.startswith("pytorch/pytorch:") and "cuda" in base and "runtime" in base
    assert any(k == "RUN" and ".[runner]" in r for k, r in runner)


def test_the_collector_image_installs_no_torch():
    """The server never runs a model: no torch wheel, no [runner] extra in its image."""
    runs = " ".join(r for k, r in dockerfile_instructions(REPO / "deploy/docker/collector.Dockerfile") if k == "RUN")
    assert "torch" not in runs and "runner]" not in runs and "runner," not in runs
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("torch", "safetensors")) for d in project["dependencies"])
    assert any(d.startswith("torch>=") for d in project["optional-dependencies"]["runner"])


# -- commands, ports, health checks ----------------------------------------------------------
@pytest.mark.parametrize("name", sorted(replayscope_services()))
def test_every_command_is_accepted_by_the_real_cli_parser(name):
    words = argv(SERVICES[name])
    args = build_parser().parse_args(words[1:])       # SystemExit (a failure) on a bad flag
    assert callable(args.handler)


@pytest.mark.parametrize("name", sorted(n for n, s in replayscope_services().items() if argv(s)[1] == "serve"))
def test_serve_ports_agree_with_the_port_flag_and_the_healthcheck(name):
    service = SERVICES[name]
    words = argv(service)
    port = option(words, "--port")
    assert port is not None, "serve must name its --port (the healthcheck and ports depend on it)"
    assert option(words, "--host") == "0.0.0.0", "inside a container serve must listen on every interface"
    container_ports = {str(p).rsplit(":", 1)[-1].split("/")[0] for p in service.get("ports", [])}
    assert container_ports == {port}
    health = " ".join(service["healthcheck"]["test"])
    url = urlsplit(re.search(r"https?://[^'\" ]+", health).group(0))
    assert str(url.port) == port and url.path == "/healthz"


def test_the_healthcheck_path_is_a_route_of_the_server():
    from fastapi.testclient import TestClient

    from replayscope.collector.api import create_api
    from replayscope.collector.store import Store
    from tests.live_server import LOOPBACK_BASE

    store = Store.open("sqlite://", upgrade=True)
    try:
        app = create_api(store, Settings(run_services=False))
        # The routers are mounted (FastAPI keeps an included router whole): ask the app itself.
        assert {"/healthz", "/metrics"} <= set(app.openapi()["paths"])
        client = TestClient(app, base_url=LOOPBACK_BASE)
        assert client.get("/healthz").json() == {"status": "ok", "db": "sqlite"}
        assert client.get("/metrics").status_code == 200
    finally:
        store.dispose()


def test_every_service_has_a_healthcheck_or_is_a_one_shot_job():
    for name, service in SERVICES.items():
        one_shot = service.get("restart") == "no"
        assert one_shot or "healthcheck" in service, f"{name}: no healthcheck"


def test_depends_on_names_services_of_the_same_or_default_profile():
    for name, service in SERVICES.items():
        profiles = set(service.get("profiles", []))
        for dep in service.get("depends_on", {}):
            assert dep in SERVICES, f"{name} depends on unknown service {dep}"
            dep_profiles = set(SERVICES[dep].get("profiles", []))
            assert not dep_profiles or dep_profiles & profiles, f"{name} depends on {dep} outside its profile"


def test_the_runner_streams_to_a_collector_service_on_its_port():
    runner = SERVICES["runner"]
    assert runner["profiles"] == ["gpu"]
    words = argv(runner)
    assert words[:2] == ["replayscope", "run"]
    url = urlsplit(option(words, "--collector"))
    target = SERVICES[url.hostname]
    assert option(argv(target), "--port") == str(url.port)
    devices = runner["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert option(words, "--backend") in ("cuda", "compile", "auto")


def test_postgres_profile_points_a_collector_at_postgres_upgraded_before_serving():
    serve, migrate = SERVICES["replayscope-pg"], SERVICES["migrate-pg"]
    assert serve["profiles"] == migrate["profiles"] == SERVICES["postgres"]["profiles"] == ["postgres"]
    url = environment(serve)["REPLAYSCOPE_DB"]
    assert url == environment(migrate)["REPLAYSCOPE_DB"]
    parsed = urlsplit(url)
    assert parsed.scheme == "postgresql+psycopg" and parsed.hostname == "postgres"
    pg_env = environment(SERVICES["postgres"])
    assert parsed.username == pg_env["POSTGRES_USER"] and parsed.password == pg_env["POSTGRES_PASSWORD"]
    assert parsed.path.lstrip("/") == pg_env["POSTGRES_DB"]
    assert argv(migrate)[1:3] == ["db", "upgrade"]
    assert serve["depends_on"]["migrate-pg"]["condition"] == "service_completed_successfully"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_sqlite_store_is_upgraded_before_serving_on_a_named_volume():
    serve, migrate = SERVICES["replayscope"], SERVICES["migrate"]
    url = environment(serve)["REPLAYSCOPE_DB"]
    assert url == environment(migrate)["REPLAYSCOPE_DB"] and url.startswith("sqlite:////data/")
    assert serve["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    for service in (serve, migrate):
        assert "replayscope-data:/data" in service["volumes"]


# -- environment ------------------------------------------------------------------------------
def test_every_replayscope_variable_is_a_setting_or_a_runner_flag():
    settings = {f"REPLAYSCOPE_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    known = settings | runner_flag_variables()
    assert "REPLAYSCOPE_TOKEN" in runner_flag_variables()
    for name, service in SERVICES.items():
        for variable, value in environment(service).items():
            if variable.startswith("REPLAYSCOPE_"):
                assert variable in known, f"{name}: {variable} is neither a Settings field nor a runner flag"
                if variable in settings and value:
                    Settings.from_env({variable: value})      # and its value converts


def test_the_token_must_be_set_wherever_it_is_used():
    """Compose publishes the collector beyond loopback: it must never start without a token."""
    for name, service in SERVICES.items():
        raw = service.get("environment") or {}
        if "REPLAYSCOPE_TOKEN" in raw:
            assert str(raw["REPLAYSCOPE_TOKEN"]).startswith("${REPLAYSCOPE_TOKEN:?"), name
    served = [name for name, s in replayscope_services().items() if argv(s)[1] == "serve"]
    assert served and all("REPLAYSCOPE_TOKEN" in (SERVICES[n].get("environment") or {}) for n in served)


def test_collector_environments_make_valid_settings():
    for name, service in replayscope_services().items():
        if argv(service)[1] in ("serve", "db"):
            settings = Settings.from_env(environment(service))
            assert settings.db.startswith(("sqlite:", "postgresql+psycopg:")), name


# -- volumes and mounted files ---------------------------------------------------------------
def test_every_mounted_file_exists_and_named_volumes_are_declared():
    declared = set(COMPOSE.get("volumes", {}))
    used = set()
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), f"{name}: mounts {source}, which does not exist"
            else:
                assert source in declared, f"{name}: volume {source} is not declared"
                used.add(source)
    assert used == declared, f"declared but unused volumes: {declared - used}"


# -- Prometheus -------------------------------------------------------------------------------
def test_prometheus_mounts_its_config_and_the_rules_it_loads():
    mounts = {v.split(":")[1]: v.split(":")[0] for v in SERVICES["prometheus"]["volumes"]}
    config_in_container = option(argv(SERVICES["prometheus"]), "--config.file")
    assert Path(REPO / mounts[config_in_container]).resolve() == (PROMETHEUS_DIR / "prometheus.yml").resolve()
    config_dir = Path(config_in_container).parent
    for rules in PROMETHEUS["rule_files"]:
        assert (PROMETHEUS_DIR / rules).is_file(), f"rule file {rules} does not exist"
        assert str(config_dir / rules) in mounts, f"{rules} is not mounted next to the config"
    assert "replayscope-rules.yml" in PROMETHEUS["rule_files"]


def test_prometheus_scrapes_the_collector_services_on_their_ports():
    targets = [(job.get("metrics_path", "/metrics"), target)
               for job in PROMETHEUS["scrape_configs"] for sc in job["static_configs"] for target in sc["targets"]]
    assert targets
    for path, target in targets:
        host, port = target.rsplit(":", 1)
        assert host in SERVICES, f"scrape target {target}: no such compose service"
        assert option(argv(SERVICES[host]), "--port") == port
        assert path == "/metrics"
    assert "replayscope" in {t.split(":")[0] for _, t in targets}


def test_alertmanager_target_is_the_compose_service():
    for am in PROMETHEUS["alerting"]["alertmanagers"]:
        for target in am["static_configs"][0]["targets"]:
            host, port = target.split(":")
            assert host in SERVICES and f"{port}:{port}" in SERVICES[host]["ports"]
    mounted = SERVICES["alertmanager"]["volumes"][0].split(":")[0]
    assert yaml.safe_load((REPO / mounted).read_text())["route"]["receiver"]


def test_promtool_accepts_the_prometheus_config():
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing; CI must check the Prometheus config (Debian: prometheus)")
        pytest.skip("promtool not installed")
    result = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=PROMETHEUS_DIR,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


# -- Grafana ----------------------------------------------------------------------------------
GRAFANA_DIR = REPO / "deploy" / "grafana"
DASHBOARD = json.loads((GRAFANA_DIR / "dashboards" / "replayscope.json").read_text())
_SELECTOR = re.compile(r"\b(replayscope_[a-z0-9_]+)\s*(\{[^}]*\})?")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
# Grafana's variables, as Grafana substitutes them, so promtool sees plain PromQL.
_GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "6h", "$source": ".*", "$model": ".*"}


def grafana_mounts() -> dict[str, Path]:
    """Container path -> repository path of Grafana's bind mounts."""
    out = {}
    for volume in SERVICES["grafana"]["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            out[target] = REPO / source
    return out


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard's panels."""
    panels = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
    return [t["expr"] for p in panels for t in p["targets"]]


def variable_queries() -> list[str]:
    return [v["query"]["query"] for v in DASHBOARD["templating"]["list"] if v["type"] == "query"]


def exposed_series() -> dict[str, set[str]]:
    """Sample name -> label names, from the collector's real exposition with every metric set."""
    from prometheus_client.parser import text_string_to_metric_families

    from replayscope.collector.ingest import IngestResult
    from replayscope.collector.api.metrics import Metrics

    metrics = Metrics(store_gauges=lambda: ({"eager-high": 1}, {"finished": 2}))
    metrics.observe_ingest(IngestResult(
        accepted=3, duplicates=1, source="runner", model="tiny", step_counts={("decode", "eager", "prefill"): 2},
        tokens_by_stage={"decode": 8}, padded_by_stage={"decode": 2}, capture_durations=[("decode", 0.1)],
        pool_bytes=1 << 20))
    metrics.observe_rejected(2)
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_grafana_mounts_exist_and_provision_the_datasource_and_dashboards():
    mounts = grafana_mounts()
    for target, source in mounts.items():
        assert source.exists(), f"grafana mounts {source}, which does not exist"
    datasources = yaml.safe_load((mounts["/etc/grafana/provisioning/datasources"] / "prometheus.yml").read_text())
    [prometheus] = datasources["datasources"]
    url = urlsplit(prometheus["url"])
    assert prometheus["type"] == "prometheus" and url.hostname in SERVICES
    assert option(argv(SERVICES[url.hostname]), "--web.listen-address") == f":{url.port}"
    providers = yaml.safe_load((mounts["/etc/grafana/provisioning/dashboards"] / "replayscope.yml").read_text())
    [provider] = providers["providers"]
    assert provider["type"] == "file"
    dashboards = mounts[provider["options"]["path"]]
    assert (dashboards / "replayscope.json").is_file()
    home = environment(SERVICES["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (mounts[str(Path(home).parent)] / Path(home).name).is_file()
    assert SERVICES["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_the_dashboard_reads_prometheus_through_its_datasource_variable():
    [datasource] = [v for v in DASHBOARD["templating"]["list"] if v["type"] == "datasource"]
    assert datasource["query"] == "prometheus"
    panels = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
    assert panels and len({p["id"] for p in DASHBOARD["panels"]}) == len(DASHBOARD["panels"])
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in [panel, *panel["targets"]]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${" + datasource["name"] + "}"}


def test_every_dashboard_query_names_metrics_and_labels_the_collector_exposes():
    series = exposed_series()
    for expr in dashboard_queries() + variable_queries():
        selectors = _SELECTOR.findall(expr)
        assert selectors, f"no replayscope metric in {expr!r}"
        labels: set[str] = {"le"}
        for name, matchers in selectors:
            assert name in series, f"{name} is not exposed by collector/api/metrics.py ({expr!r})"
            for label in _MATCHER.findall(matchers):
                assert label in series[name], f"{name} has no label {label} ({expr!r})"
            labels |= series[name]
        for group in _GROUPING.findall(expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in labels, f"grouping by {label}, which no metric of {expr!r} has"


def test_the_dashboard_shows_the_model_label_and_the_decode_padding_share():
    text = json.dumps(DASHBOARD)
    assert 'label_values(replayscope_steps_total{source=~\\"$source\\"}, model)' in text
    padding = next(p for p in DASHBOARD["panels"] if p["title"].startswith("Padding"))
    expr = padding["targets"][0]["expr"]
    assert "replayscope_padded_tokens_total" in expr and "replayscope_tokens_total" in expr
    assert DECODE_STAGES_MATCHER in expr


_STAGE_FILTER = re.compile(r'\bstage\s*(?:=~|!~|!=|=)\s*"[^"]*"')


def test_every_dashboard_stage_filter_is_the_decode_stages_of_the_built_in_rule():
    """A panel that picks stages picks the decode stages (replayscope.contract.wire.DECODE_STAGES) with the
    matcher the shipped Prometheus rule uses, so a vLLM run's decode and mixed batches and an
    SGLang run's decode steps fill it as a runner run's decode steps do."""
    from replayscope.collector.alert_rule import DEFAULTS as RULE_DEFAULTS
    from replayscope.contract.wire import DECODE_STAGES, stages_of

    filters = [m.group(0) for expr in dashboard_queries() for m in _STAGE_FILTER.finditer(expr)]
    assert filters and set(filters) == {DECODE_STAGES_MATCHER}
    assert DECODE_STAGES_MATCHER == 'stage=~"' + "|".join(stages_of(RULE_DEFAULTS["stage"])) + '"'
    assert set(stages_of(RULE_DEFAULTS["stage"])) == set(DECODE_STAGES) == {"decode", "mixed"}
    eager = next(p for p in DASHBOARD["panels"] if p["title"].endswith("steps that ran eager"))
    assert eager["targets"][0]["expr"].count(DECODE_STAGES_MATCHER) == 2      # numerator and denominator


def test_promtool_accepts_every_dashboard_query(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing; CI must check the dashboard's PromQL (Debian: prometheus)")
        pytest.skip("promtool not installed")
    rules = []
    for i, expr in enumerate(dashboard_queries()):
        for variable, value in _GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"a Grafana variable promtool cannot see: {expr!r}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout + result.stderr


def test_the_collectors_send_their_alerts_to_the_compose_alertmanager_which_always_runs():
    """Issue 34: the built-in eager-ratio rule's alerts reach compose's Alertmanager out of the
    box: every collector is pointed at the service (allowed as a private receiver), the service
    is in the default profile, and the store the collector serves has the rule when it starts."""
    alertmanager = SERVICES["alertmanager"]
    assert not alertmanager.get("profiles"), "started by a plain docker compose up"
    served = [s for s in replayscope_services().values() if argv(s)[1] == "serve"]
    assert len(served) == 2
    for service in served:
        settings = Settings.from_env(environment(service))
        url = urlsplit(settings.alertmanager_url or "")
        assert url.hostname == "alertmanager" and f"{url.port}:{url.port}" in alertmanager["ports"]
        assert url.hostname in (settings.webhook_allow or "").split(",")


def test_the_store_compose_migrates_starts_with_the_built_in_rule(tmp_path, capsys):
    from replayscope.app.cli import main
    from replayscope.collector.alerting.alerts import BUILTIN_EAGER_RATIO_RULE
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    migrate = SERVICES["migrate"]
    assert argv(migrate)[1:] == ["db", "upgrade"]
    url = f"sqlite:///{tmp_path}/replayscope.db"                # its REPLAYSCOPE_DB, on a fresh volume
    assert main([*argv(migrate)[1:], "--db", url]) == 0
    store = Store.open(url)
    assert [rule.name for rule in queries.alert_rules(store)] == [BUILTIN_EAGER_RATIO_RULE["name"]]
    store.dispose()
