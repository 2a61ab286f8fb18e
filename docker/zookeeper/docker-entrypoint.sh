#!/bin/bash
# Write /conf/zoo.cfg from ZOO_* variables (as the official image does) and run the server
# in the foreground, logging to stdout.
set -euo pipefail

config="$ZOO_CONF_DIR/zoo.cfg"
if [[ ! -f "$config" ]]; then
    {
        echo "dataDir=$ZOO_DATA_DIR"
        echo "dataLogDir=$ZOO_DATA_LOG_DIR"
        echo "tickTime=$ZOO_TICK_TIME"
        echo "initLimit=$ZOO_INIT_LIMIT"
        echo "syncLimit=$ZOO_SYNC_LIMIT"
        echo "maxClientCnxns=$ZOO_MAX_CLIENT_CNXNS"
        echo "standaloneEnabled=$ZOO_STANDALONE_ENABLED"
        echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"
        for server in ${ZOO_SERVERS:-server.1=localhost:2888:3888;2181}; do
            echo "$server"
        done
        if [[ -n "${ZOO_4LW_COMMANDS_WHITELIST:-}" ]]; then
            echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"
        fi
        for entry in ${ZOO_CFG_EXTRA:-}; do
            echo "$entry"
        done
    } > "$config"
fi
if [[ ! -f "$ZOO_DATA_DIR/myid" ]]; then
    echo "${ZOO_MY_ID:-1}" > "$ZOO_DATA_DIR/myid"
fi
if [[ "${1:-}" == "zkServer" ]]; then
    # Debian's jars name no logging backend: slf4j-simple sends the server log to stderr.
    # JVMFLAGS: extra JVM options, read under the same name as the official image's zkServer.sh.
    # shellcheck disable=SC2086
    exec java -Dorg.slf4j.simpleLogger.showDateTime=true ${JVMFLAGS:-} \
        -cp "$ZOO_CONF_DIR:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$config"
fi
exec "$@"
