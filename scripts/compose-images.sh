#!/usr/bin/env bash
# Stand-ins for the public images docker-compose.yml names, built on this machine from Debian's
# packages and the package index, for the compose test (tests/compose/docker-compose.test.yml selects
# them; users keep the official images):
#   torchx-airflow-test/base     debootstrap --variant=minbase of Debian from this machine's apt source
#   torchx-airflow-test/postgres Debian's PostgreSQL, initialised as the postgres image is
#   torchx-airflow-test/redis    Debian's redis-server
#   torchx-airflow-test/pytools  MLflow (the mlflow image's version) and moto's S3 server (for MinIO)
#   torchx-airflow-test/airflow  Airflow from the index at the Dockerfile's version, with this checkout
# Each image records a key of what it was built from and is rebuilt only when that changes: a second
# run takes seconds. Builds run in containers on the host network with the host's pip settings and CA
# bundle (scripts/host-pip-settings.py), and are committed as images. Needs root and a Docker daemon
# (scripts/install-docker.sh).
#   bash scripts/compose-images.sh
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$REPO/tests/compose/images"
PREFIX=torchx-airflow-test
SUITE="${DEBIAN_SUITE:-bookworm}"
# What the base image is made of besides the Debian sources: change it to rebuild the base.
# How every other image is built: change it to rebuild them all.
STAGE_RECIPE="docker run on the host network, host pip settings sourced by the build's shell; docker commit"
BASE_RECIPE="debootstrap --variant=minbase; sources.list from apt-get indextargets; LANG=C.UTF-8"
PYTHON="${PYTHON:-python3}"
AIRFLOW_VERSION="$(sed -nE 's|^FROM apache/airflow:([0-9.]+)-.*|\1|p' "$REPO/Dockerfile")"
VENV_PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
MLFLOW_VERSION="$(sed -nE 's|^ *image: ghcr.io/mlflow/mlflow:v([0-9.]+)$|\1|p' "$REPO/docker-compose.yml")"

key_of() { cat "$@" | sha256sum | cut -c1-16; }
built_key() { docker image inspect -f '{{index .Config.Labels "torchx-airflow.key"}}' "$1" 2> /dev/null || true; }
say() { printf '%s %s\n' "$(date +%T)" "$*"; }

# The Debian sources apt on this machine uses for $SUITE (and its updates and security suites).
debian_sources() {
  apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT) $(ORIGIN)' 'Identifier: Packages' \
    | awk -v s="$SUITE" '($4 == "Debian" || $4 == "Debian-Security") && index($2, s) == 1 {print "deb", $1, $2, $3}' \
    | sort -u
}

base() {
  local image="$PREFIX/base" sources mirror key root
  sources="$(debian_sources)"
  mirror="$(awk -v s="$SUITE" '$3 == s {print $2; exit}' <<< "$sources")"
  [ -n "$mirror" ] || { echo "no Debian $SUITE source in this machine's apt sources" >&2; exit 1; }
  key="$(printf '%s\n%s\n' "$sources" "$BASE_RECIPE" | key_of)"
  if [ "$(built_key "$image")" = "$key" ]; then say "$image: up to date"; return; fi
  say "$image: debootstrap $SUITE from $mirror"
  local started="$SECONDS"
  root="$(mktemp -d)"
  debootstrap --variant=minbase "$SUITE" "$root" "$mirror" > "$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
  printf '%s\n' "$sources" > "$root/etc/apt/sources.list"
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  tar -C "$root" -c . | docker import --change "LABEL torchx-airflow.key=$key" \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' - "$image" > /dev/null
  rm -rf "$root" "$root.log"
  say "$image: built in $((SECONDS - started)) s"
}

# stage IMAGE FROM SCRIPT KEY-INPUT... -- COMMIT-CHANGE...: run SCRIPT in FROM, commit it as IMAGE.
stage() {
  local image="$1" from="$2" script="$3" key inputs=() changes=() name
  shift 3
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do inputs+=("$1"); shift; done
  [ "$#" -gt 0 ] && shift
  for c in "$@"; do changes+=(--change "$c"); done
  key="$( { echo "$STAGE_RECIPE"; docker image inspect -f '{{.Id}}' "$from"; cat "$script" "${inputs[@]}"
    printf '%s\n' "$@"; } | key_of)"
  if [ "$(built_key "$image")" = "$key" ]; then say "$image: up to date"; return; fi
  say "$image: building from $from ($script)"
  local started="$SECONDS"
  name="torchx-airflow-build-${image##*/}"
  docker rm -f "$name" > /dev/null 2>&1 || true
  mapfile -t mounts < <("$PYTHON" "$REPO/scripts/host-pip-settings.py")
  { "$PYTHON" "$REPO/scripts/host-pip-settings.py" --env
    printf 'export AIRFLOW_VERSION=%q MLFLOW_VERSION=%q\n' "$AIRFLOW_VERSION" "$MLFLOW_VERSION"; } > "/tmp/$name.env"
  # the settings reach the build's shell only: what `docker run -e` sets, `docker commit` keeps
  docker run --name "$name" --network host "${mounts[@]}" -v "/tmp/$name.env:/run/build.env:ro" \
    -v "$BUILD:/build:ro" -v "$REPO:/src:ro" \
    "$from" bash -c '. /run/build.env && exec bash "$0"' "/build/$(basename "$script")" > "/tmp/$name.log" 2>&1 \
    || { tail -40 "/tmp/$name.log" >&2; docker rm -f "$name" > /dev/null; exit 1; }
  rm -f "/tmp/$name.env"
  docker commit "${changes[@]}" --change "LABEL torchx-airflow.key=$key" "$name" "$image" > /dev/null
  docker rm "$name" > /dev/null
  say "$image: built in $((SECONDS - started)) s"
}

# The checkout's sources as the airflow image installs them (what its key depends on).
sources_hashes() {
  (cd "$REPO" && git ls-files -z -- pyproject.toml README.md torchx_airflow tracker scripts/install-torch.sh \
    | xargs -0 sha256sum)
}

base
# The images on the base are independent: built side by side (their downloads overlap).
pids=()
stage "$PREFIX/postgres" "$PREFIX/base" "$BUILD/postgres.sh" "$BUILD/postgres-entrypoint.sh" -- \
  'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' 'CMD ["postgres"]' \
  'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' &
pids+=("$!")
stage "$PREFIX/redis" "$PREFIX/base" "$BUILD/redis.sh" -- \
  'CMD ["redis-server", "--protected-mode", "no", "--save", ""]' &
pids+=("$!")
stage "$PREFIX/pytools" "$PREFIX/base" "$BUILD/pytools.sh" <(echo "$MLFLOW_VERSION") -- \
  "ENV PATH=$VENV_PATH" 'CMD ["bash"]' &
pids+=("$!")
stage "$PREFIX/airflow-deps" "$PREFIX/base" "$BUILD/airflow-deps.sh" \
  "$REPO/pyproject.toml" "$REPO/tracker/pyproject.toml" "$REPO/scripts/install-torch.sh" <(echo "$AIRFLOW_VERSION") -- &
pids+=("$!")
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || { echo "an image build failed (its log is above)" >&2; exit 1; }
stage "$PREFIX/airflow" "$PREFIX/airflow-deps" "$BUILD/airflow.sh" "$BUILD/airflow-entrypoint.sh" <(sources_hashes) -- \
  "ENV PATH=$VENV_PATH" 'ENV AIRFLOW_HOME=/opt/airflow' 'ENV PYTHONDONTWRITEBYTECODE=1' 'WORKDIR /opt/airflow' \
  'ENTRYPOINT ["/usr/bin/dumb-init", "--", "/usr/local/bin/airflow-entrypoint"]' 'CMD ["--help"]'
say "stand-in images ready"
