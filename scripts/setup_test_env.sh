# Set-up for the whole test suite on a Debian/Ubuntu machine; sourced by scripts/test.sh.
#
# Each step says what it does. Missing system packages are installed with apt-get when this
# runs as root; otherwise it stops with the one command to run. PostgreSQL: the server at
# $GRADWATCH_TEST_PG when set, else one answering on 127.0.0.1:5432 (GRADWATCH_PG_PROBE
# changes the address), else a throwaway cluster from the installed binaries in a temporary
# folder on a free port, stopped by gw_cleanup (scripts/test.sh traps it on exit).

GW_APT_UPDATED=""
GW_PG_DIR=""

gw_say() { echo "== $*"; }

# Install Debian packages when root with apt-get; otherwise stop with the command to run.
gw_install() {
  local why=$1
  shift
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    gw_say "installing $* ($why)"
    if [ -z "$GW_APT_UPDATED" ]; then
      apt-get update -qq && GW_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null && return 0
  fi
  echo "gradwatch tests: $* not installed ($why). Run: sudo apt-get install -y $*" >&2
  return 1
}

gw_need_cc() {
  command -v cc >/dev/null || gw_install "a C compiler builds the fused CPU norm kernel" \
    gcc libc6-dev || return 1
  gw_say "C compiler: $(cc --version | head -1)"
}

gw_first() {
  local path
  for path in "$@"; do [ -x "$path" ] && { echo "$path"; return 0; }; done
  return 1
}

gw_need_chromium() {
  if ! gw_first /usr/bin/chromium /usr/bin/chromium-browser >/dev/null ||
    ! gw_first /usr/bin/chromedriver /usr/lib/chromium/chromedriver >/dev/null; then
    gw_install "Chromium and its driver run the dashboard's browser tests" \
      chromium chromium-driver || return 1
  fi
  gw_say "browser: $("$(gw_first /usr/bin/chromium /usr/bin/chromium-browser)" --version 2>/dev/null)"
}

# Whether a TCP server answers on host:port (bash's /dev/tcp: no client needed).
gw_answers() { (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; }

gw_pg_bin() {
  local dir
  dir=$(dirname "$(command -v initdb 2>/dev/null || true)")
  if [ ! -x "$dir/initdb" ]; then
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  fi
  [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && echo "$dir"
}

gw_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

gw_need_postgres() {
  local probe=${GRADWATCH_PG_PROBE:-127.0.0.1:5432} bin port owner
  if [ -n "${GRADWATCH_TEST_PG:-}" ]; then
    gw_say "PostgreSQL: using GRADWATCH_TEST_PG"
    return 0
  fi
  if gw_answers "$probe"; then
    gw_say "PostgreSQL: the server on $probe"
    return 0
  fi
  bin=$(gw_pg_bin) || {
    gw_install "PostgreSQL's binaries run the server tests" postgresql || return 1
    bin=$(gw_pg_bin)
  }
  # initdb refuses to run as root: the cluster then belongs to the postgres user (or nobody).
  owner=$(id -un)
  if [ "$(id -u)" = 0 ]; then owner=$(id -u postgres >/dev/null 2>&1 && echo postgres || echo nobody); fi
  port=$(gw_free_port)
  GW_PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gradwatch-pg.XXXXXX")
  chown "$owner" "$GW_PG_DIR"
  gw_say "PostgreSQL: nothing answers on $probe; starting a throwaway cluster in $GW_PG_DIR on port $port"
  gw_as "$owner" "$bin/initdb" -D "$GW_PG_DIR/data" -U postgres --auth=trust >"$GW_PG_DIR/initdb.log" 2>&1 &&
    gw_as "$owner" "$bin/pg_ctl" -D "$GW_PG_DIR/data" -l "$GW_PG_DIR/server.log" -w \
      -o "-p $port -k $GW_PG_DIR -c listen_addresses=127.0.0.1" start >/dev/null || {
    echo "gradwatch tests: the throwaway PostgreSQL did not start; see $GW_PG_DIR/*.log" >&2
    return 1
  }
  export GRADWATCH_TEST_PG="postgresql://postgres@127.0.0.1:$port/postgres"
  GW_PG_BIN=$bin
  GW_PG_OWNER=$owner
}

gw_as() {
  local user=$1
  shift
  # from / : the postgres user may not be allowed into the working directory
  if [ "$user" = "$(id -un)" ]; then "$@"; else (cd / && runuser -u "$user" -- "$@"); fi
}

# Stop and delete the throwaway cluster, if one was started.
gw_cleanup() {
  if [ -n "$GW_PG_DIR" ] && [ -d "$GW_PG_DIR" ]; then
    gw_as "$GW_PG_OWNER" "$GW_PG_BIN/pg_ctl" -D "$GW_PG_DIR/data" -m fast -w stop >/dev/null 2>&1
    rm -rf "$GW_PG_DIR"
    gw_say "PostgreSQL: the throwaway cluster is stopped and removed"
    GW_PG_DIR=""
  fi
}

gw_setup_test_env() {
  gw_need_cc && gw_need_chromium && gw_need_postgres
}

# Create the virtual environment $2 with python $1 (Debian ships venv's pip separately).
gw_need_venv() {
  local py=$1 venv=$2
  [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1 && return 0
  rm -rf "$venv"
  if ! "$py" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    gw_install "Python's venv module creates .venv" \
      "python$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv" ||
      return 1
    "$py" -m venv "$venv"
  fi
  gw_say "created $venv with $("$venv/bin/python" --version 2>/dev/null)"
}
