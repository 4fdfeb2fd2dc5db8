#!/usr/bin/env bash
# A one-node SLURM on this machine, to run the workflow's cluster profile against real slurmctld and
# slurmd daemons: the `slurm`-marked test (tests/test_slurm.py) and `snakemake --profile
# profiles/slurm-demo` by hand. Debian 12's packages (slurm-wlm 22.05 and munge), as root, without
# systemd (the daemons are started directly and found again by their pid files).
#
#   tools/local_slurm.sh start    install what is missing (apt), write the config, start munged,
#                                 slurmctld and slurmd, wait until the node takes jobs
#   tools/local_slurm.sh status   the daemons, sinfo, squeue; exit status 0 when the node takes jobs
#   tools/local_slurm.sh stop     stop the daemons (by the pid files of their config)
#
# Every step is idempotent: `start` again installs nothing new, rewrites the config only when it
# changed (then restarts slurmctld and slurmd) and starts only what is not running.
#
# The cluster: one node (this host, its CPUs and memory as `slurmd -C` reports them), two
# partitions on it, `cpu` (default) and `gpu`, as profiles/slurm expects. The node declares one
# GPU as a generic resource whose device file is /dev/null (gres.conf `Name=gpu File=/dev/null`),
# so a job asking for `--gpus=1` (the executor plugin's translation of the `gpu: 1` resource) is
# scheduled on a node without a GPU; the job then runs on the CPU (the demo's runtime.device: cpu).
# A GPU declared without a file (`Count=1`, with or without `Flags=CountOnly`) is not counted by
# slurmd 22.05: the node goes INVAL ("gres/gpu count reported lower than configured (0 < 1)");
# and without any declaration sbatch refuses the job ("Invalid generic resource (gres)
# specification"). LOCAL_SLURM_GPU=0 declares none.
#
# No accounting daemon (slurmdbd): `sacct` answers nothing, so profiles/slurm-demo sets
# `slurm-status-command: squeue`; finished jobs stay visible to squeue and `scontrol show job`
# for MinJobAge (1 hour here), and every finished job gets one line in $LOG_DIR/jobcomp.log
# (JobCompType=jobcomp/filetxt: state, partition, time limit, CPUs, memory).
# A job asking for more than the node has is refused by sbatch (EnforcePartLimits=ALL: "More
# processors requested than permitted"); with SLURM's default (NO) too many CPUs are accepted and
# the job stays pending for ever (reason PartitionConfig). Processes are tracked without cgroups
# (proctrack/linuxproc, task/none): limits are scheduled, not enforced. A cancelled or timed-out
# job gets SIGTERM, then SIGKILL KillWait=30 s later (SLURM's default, as on a real cluster).
set -euo pipefail

GPU=${LOCAL_SLURM_GPU:-1}
[[ $GPU == 0 || $GPU == 1 ]] || { echo "local_slurm: LOCAL_SLURM_GPU is 0 or 1, not $GPU" >&2; exit 2; }
HOST=$(hostname -s)
CONF_DIR=/etc/slurm
PID_DIR=/run/slurm
LOG_DIR=/var/log/slurm
SPOOL_DIR=/var/spool/slurmd
STATE_DIR=/var/lib/slurm/slurmctld
MUNGE_PID=/run/munge/munged.pid
PACKAGES=(munge slurmctld slurmd slurm-client)

say() { echo "local_slurm: $*" >&2; }
die() { say "$*"; exit 1; }

running() {  # running PIDFILE: the process named in PIDFILE is alive
    [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

node_takes_jobs() {
    sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | grep -qxE 'idle|mixed|allocated|completing'
}

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    say "installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

setup_munge() {
    mkdir -p /run/munge
    chown munge:munge /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        say "creating /etc/munge/munge.key"
        mungekey --create --force
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 600 /etc/munge/munge.key
    if ! running "$MUNGE_PID"; then
        say "starting munged"
        runuser -u munge -- /usr/sbin/munged
    fi
    munge -n | unmunge >/dev/null || die "munge does not work (see /var/log/munge/munged.log)"
}

node_value() {  # node_value KEY: KEY=<n> from `slurmd -C` (this host's hardware as slurmd sees it)
    slurmd -C | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1
}

# the config this host should have, on stdout; $1: gres.conf or slurm.conf
render() {
    local cpus mem gres=""
    cpus=$(node_value CPUs)
    mem=$(( $(node_value RealMemory) * 95 / 100 ))  # leave the daemons and the submitting snakemake some room
    if [[ $GPU == 1 ]]; then gres=" Gres=gpu:1"; fi
    case $1 in
    gres.conf)
        echo "# written by tools/local_slurm.sh: one GPU to schedule on, no device (task/none constrains nothing)"
        if [[ $GPU == 1 ]]; then echo "NodeName=$HOST Name=gpu File=/dev/null"; fi
        ;;
    slurm.conf)
        cat <<EOF
# written by tools/local_slurm.sh: one node ($HOST), partitions cpu (default) and gpu on it
ClusterName=local
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
MpiDefault=none
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=$PID_DIR/slurmctld.pid
SlurmdPidFile=$PID_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
EnforcePartLimits=ALL
MinJobAge=3600
KillWait=30
SlurmdTimeout=60
GresTypes=gpu
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem$gres State=UNKNOWN
PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$HOST Default=NO MaxTime=INFINITE State=UP
EOF
        ;;
    esac
}

write_config() {  # prints "changed" when a file was rewritten
    mkdir -p "$CONF_DIR" "$PID_DIR" "$LOG_DIR" "$SPOOL_DIR" "$STATE_DIR"
    chown slurm:slurm "$PID_DIR" "$LOG_DIR" "$STATE_DIR"
    local name new
    for name in slurm.conf gres.conf; do
        new=$(render "$name")
        if [[ ! -f $CONF_DIR/$name || "$(cat "$CONF_DIR/$name")" != "$new" ]]; then
            printf '%s\n' "$new" >"$CONF_DIR/$name.tmp"
            mv "$CONF_DIR/$name.tmp" "$CONF_DIR/$name"
            echo changed
        fi
    done
}

stop_daemon() {  # stop_daemon PIDFILE NAME
    running "$1" || return 0
    local pid
    pid=$(cat "$1")
    say "stopping $2 ($pid)"
    kill "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    say "$2 ($pid) did not stop in 30 s (slurmd waits on an unreachable slurmctld): SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

start() {
    [[ $EUID == 0 ]] || die "run as root (it installs packages and starts daemons)"
    install_packages
    setup_munge
    if [[ -n $(write_config) ]]; then
        say "config written to $CONF_DIR"
        stop_daemon "$PID_DIR/slurmd.pid" slurmd
        stop_daemon "$PID_DIR/slurmctld.pid" slurmctld
    fi
    if ! running "$PID_DIR/slurmctld.pid"; then
        say "starting slurmctld (log $LOG_DIR/slurmctld.log)"
        slurmctld
    fi
    if ! running "$PID_DIR/slurmd.pid"; then
        say "starting slurmd (log $LOG_DIR/slurmd.log)"
        slurmd -N "$HOST"
    fi
    for i in $(seq 60); do
        for daemon in slurmctld slurmd; do
            # a daemon writes its pid file after it forks: give it 10 s before calling it stopped
            running "$PID_DIR/$daemon.pid" || (( i <= 10 )) \
                || die "$daemon stopped: $(grep -E 'fatal|error' "$LOG_DIR/$daemon.log" | tail -3)"
        done
        node_takes_jobs && break
        # a node that was down (a daemon restarted) comes back once slurmd registers
        scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
        sleep 1
    done
    node_takes_jobs || die "node $HOST does not take jobs: $(sinfo -h -N -o '%T %E' 2>&1); see $LOG_DIR/"
    sinfo
}

stop() {
    stop_daemon "$PID_DIR/slurmd.pid" slurmd
    stop_daemon "$PID_DIR/slurmctld.pid" slurmctld
    stop_daemon "$MUNGE_PID" munged
}

status() {
    local pidfile
    for pidfile in "$MUNGE_PID" "$PID_DIR/slurmctld.pid" "$PID_DIR/slurmd.pid"; do
        if running "$pidfile"; then echo "$(basename "$pidfile" .pid): running ($(cat "$pidfile"))"
        else echo "$(basename "$pidfile" .pid): not running"; fi
    done
    if command -v sinfo >/dev/null; then sinfo || true; squeue || true; fi
    node_takes_jobs
}

case ${1:-} in
start | stop | status) "$1" ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
