# Sourced by run.sh: the daemons of one fleet run, each started inside its namespace (net.sh) and recorded
# in $RUN/pids, so that run.sh's cleanup (which also ends whatever is left in the namespaces) can name them.
# Needs RUN (under /tmp: in-root.sh bind-mounts it into the chroot), ROOT (the sid chroot), HERE, SID (the
# scripts/ironic-sid folder).

API_IP=10.47.0.10
API_PORT=6385
RPC_PORT=8089
DB_PORT=3306
HTTP_PORT=8080

# MariaDB (the host's, Debian's package) in the ctl namespace: data in $RUN/mariadb, on its own socket and
# on $API_IP:$DB_PORT, one database `ironic` the API and both conductors share.
fleet_mariadb_up() {
  local dir=$RUN/mariadb
  mkdir -p "$dir/data"
  mariadb-install-db --no-defaults --user=root --datadir="$dir/data" --auth-root-authentication-method=normal \
    --skip-test-db > "$dir/install.log" 2>&1 || { tail -20 "$dir/install.log" >&2; return 1; }
  ip netns exec "$(fleet_ns ctl)" setsid mariadbd --no-defaults --user=root --datadir="$dir/data" \
    --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --bind-address="$API_IP" --port="$DB_PORT" \
    --skip-name-resolve --max-connections=500 --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=2 \
    --log-error="$dir/error.log" < /dev/null > /dev/null 2>&1 &
  echo "mariadb $!" >> "$RUN/pids"
  for _ in $(seq 120); do
    mariadb --no-defaults -S "$dir/mysqld.sock" -u root -e 'SELECT 1' > /dev/null 2>&1 && break
    sleep 0.25
  done
  mariadb --no-defaults -S "$dir/mysqld.sock" -u root -e "CREATE DATABASE ironic CHARACTER SET utf8mb3;
    CREATE USER 'ironic'@'%' IDENTIFIED BY 'fleet'; GRANT ALL ON ironic.* TO 'ironic'@'%';" ||
    { tail -20 "$dir/error.log" >&2; return 1; }
}

# fleet_nginx_up NAME NS ADDRESS ROOT: nginx serving ROOT on ADDRESS:$HTTP_PORT, one access-log line per
# request with the bytes it sent and the Range asked for (the report counts them).
fleet_nginx_up() {
  local name=$1 ns=$2 addr=$3 root=$4 dir=$RUN/nginx-$1
  mkdir -p "$dir" "$root"
  cat > "$dir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
error_log $dir/error.log;
pid $dir/nginx.pid;
events { worker_connections 512; }
http {
  log_format fleet '\$remote_addr "\$request" \$status \$body_bytes_sent "\$http_range" \$request_time';
  access_log $dir/access.log fleet;
  sendfile on;
  default_type application/octet-stream;
  client_body_temp_path $dir/cb; proxy_temp_path $dir/px; fastcgi_temp_path $dir/fc;
  uwsgi_temp_path $dir/uw; scgi_temp_path $dir/sc;
  server { listen $addr:$HTTP_PORT; root $root; }
}
EOF
  ip netns exec "$ns" setsid nginx -e "$dir/error.log" -c "$dir/nginx.conf" < /dev/null > /dev/null 2>&1 &
  echo "nginx-$name $!" >> "$RUN/pids"
}

# fleet_ironic_conf NAME IP FORCE_RAW: scripts/ironic-sid/ironic.conf.in for one daemon of the fleet: its
# own state under $RUN/NAME, host NAME, its own address, MariaDB, the conductors' images from their own
# HTTP server (image_download_source=local), metadata-only cleaning (erase_devices_metadata, as operators with
# many nodes run it), and a conductor declared dead 20 s after its last heartbeat (default 60) so that the other
# takes its nodes over within the fault run.
fleet_ironic_conf() {
  local name=$1 ip=$2 force_raw=$3 dir=$RUN/$1
  mkdir -p "$dir"/{log,state,tmp,locks,deploy-logs,httpboot,certificates}
  sed -e "s#@RUN@#$dir#g" -e "s#@RPC@#json-rpc#g" -e "s#@API_PORT@#$API_PORT#g" \
    -e "s#@JSON_RPC_PORT@#$RPC_PORT#g" -e "s#@FAST_TRACK@#true#g" -e "s#@REQUIRE_TLS@#true#g" \
    -e "s#@HEARTBEAT_TIMEOUT@#${FLEET_HEARTBEAT_TIMEOUT:-30}#g" -e "s#@CALLBACK_TIMEOUT@#600#g" \
    -e "s#@DOWNLOAD_SOURCE@#local#g" -e "s#@FORCE_RAW@#$force_raw#g" \
    -e "s#@HTTP_URL@#http://$ip:$HTTP_PORT#g" \
    -e "s#^host = localhost#host = $name#" -e "s#^my_ip = .*#my_ip = $ip#" -e "s#^host_ip = .*#host_ip = $ip#" \
    -e "s#^connection = .*#connection = mysql+pymysql://ironic:fleet@$API_IP:$DB_PORT/ironic#" \
    -e "s#^endpoint_override = .*#endpoint_override = http://$API_IP:$API_PORT#" \
    -e "s#^command_timeout = .*#command_timeout = 120#" \
    -e "s#^\[deploy\]#[deploy]\nerase_devices_priority = 0\nerase_devices_metadata_priority = 10#" \
    -e "s#^\[conductor\]#[conductor]\nheartbeat_interval = 5\nheartbeat_timeout = 20#" \
    "$SID/ironic.conf.in" > "$dir/ironic.conf"
  # The lock-conflict fault inspects the nodes (inspect_interface=agent): fake boot cannot boot a ramdisk, so
  # Ironic runs unmanaged inspection and the harness boots the agent, as an operator's own PXE set-up would.
  printf '\n[inspector]\nrequire_managed_boot = false\n' >> "$dir/ironic.conf"
}

# fleet_ironic_up NAME NS DAEMON: DAEMON (ironic-api or ironic-conductor) with $RUN/NAME/ironic.conf in
# the sid chroot (in-root.sh), in namespace NS, with $RUN/hosts as its /etc/hosts so that the API finds each
# conductor by its host name over JSON-RPC. The bind mount is made in a mount namespace of its own, which
# in-root.sh's copies; the cached chroot is not changed.
fleet_ironic_up() {
  local name=$1 ns=$2 daemon=$3 dir=$RUN/$1
  ip netns exec "$ns" setsid unshare --mount --propagation private -- bash -c '
    mount --bind "$1" "$2/etc/hosts"
    shift 2
    exec "$@"' fleet-hosts "$RUN/hosts" "$ROOT" \
    "$SID/in-root.sh" "$ROOT" /usr/bin/env PYTHONWARNINGS=ignore /usr/bin/python3 "/usr/bin/$daemon" \
    --config-file "$dir/ironic.conf" --log-file "$dir/log/$daemon.log" \
    < /dev/null > "$dir/log/$daemon.stdout" 2>&1 &
  echo "$name $!" >> "$RUN/pids"
}

# fleet_stop NAME: TERM (KILL after 10 s) to the process run.sh recorded as NAME and its namespace's init.
fleet_stop() {
  local pid init
  pid=$(awk -v n="$1" '$1 == n {print $2}' "$RUN/pids" | tail -1)
  [ -n "$pid" ] || return 0
  for init in $(pgrep -P "$pid" 2>/dev/null) "$pid"; do kill -TERM "$init" 2>/dev/null || true; done
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}
