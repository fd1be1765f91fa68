# shellcheck shell=sh
# The staging shell of a bubblewrap run (see confine.py), run as
#   sh -c "$(cat stage.sh)" sh OPTION... -- NEXT-STEP...
# in the run's private mount namespace, still privileged there. It runs the server's
# limit lines, opens the fds bubblewrap and a started interpreter read (their numbers:
# launchplan.FDS), mounts the run's stage from its fstab, makes the run's network
# (network on), then execs the next step. Any failure stops the launch (set -e).
#
#   --run LINE            a shell line of the server's, run first (the run cgroup
#                         join, an rlimit: chainsteps.stage_steps)
#   --seccomp FILE        the compiled seccomp filter, on fd 3
#   --snippet FILE        the snippet, on fd 4 (bwrap --file copies it)
#   --snippet-fifo FIFO   a warm slot's snippet FIFO, its read end on fd 4
#   --prestart CODE HOOK CHAIN
#                         a started interpreter: its code FIFO on fd 7, its hook on
#                         fd 4, the run's stdout and stderr on fds 8 and 9, the
#                         chain's own output FIFO on 1 now and on 2 at the end
#   --inputs DIR          the run's input copies, on fd 5 while the fstab mounts (its
#                         line binds /proc/self/fd/5: the stage may cover DIR)
#   --fstab FILE          the stage's mounts (one mount --all)
#   --stage DIR           where the stage is mounted here
#   --owner UID:GID       who owns the run's writable folders (a run that drops)
#   --hold FIFO PIDFILE   a process that keeps the stage while it reads FIFO (which
#                         the server holds open); its pid and out/'s path: PIDFILE
#   --mpl-fonts FILE      the server's matplotlib font list, copied into the run
#                         folder's .matplotlib (the run's own copy: mplfonts.py)
#   --move DIR            where the stage is moved to once it is made
#   --net UNSHARE IP SLIRP4NETNS NSENTER
#                         egress-only network: the run's own namespace and stack
#   --block NET           a network that namespace has a prohibit route to
set -e
seccomp='' snippet='' fifo='' code='' hook='' chain='' fstab='' stage='' owner='' moved=''
inputs='' hold='' holdpid='' fonts='' fonts_text=''
unshare='' ip='' slirp='' nsenter='' routes=''
while [ "$1" != -- ]; do
    case $1 in
        --run) eval "$2" ;;
        --seccomp) seccomp=$2 ;;
        --snippet) snippet=$2 ;;
        --snippet-fifo) fifo=$2 ;;
        --prestart) code=$2 hook=$3 chain=$4 && shift 2 ;;
        --inputs) inputs=$2 ;;
        --fstab) fstab=$2 ;;
        --stage) stage=$2 ;;
        --owner) owner=$2 ;;
        --hold) hold=$2 holdpid=$3 && shift ;;
        --move) moved=$2 ;;
        --mpl-fonts) fonts=$2 ;;
        --net) unshare=$2 ip=$3 slirp=$4 nsenter=$5 && shift 3 ;;
        --block) routes="${routes:+$routes
}route add prohibit $2" ;;
        *) echo "gitpilot sandbox: stage.sh: unknown option $1" >&2 && exit 125 ;;
    esac
    shift 2
done
shift
# Files bubblewrap reads are opened here first. A FIFO is opened read-write, then
# replaced on the same fd by its read end alone (which so never waits for a
# writer); bubblewrap's --file reads it to its end when the code comes.
if [ -n "$seccomp" ]; then exec 3<"$seccomp"; fi
# shellcheck disable=SC2094 # (a FIFO, opened twice on purpose)
if [ -n "$fifo" ]; then exec 4<>"$fifo" 4<"$fifo"; fi
if [ -n "$snippet" ]; then exec 4<"$snippet"; fi
if [ -n "$code" ]; then
    # The run's stdout and stderr move to fds of their own, which the hook moves
    # back; the chain's output FIFO is opened while the run folder is in view.
    # shellcheck disable=SC2094 # (a FIFO, opened twice on purpose)
    exec 7<>"$code" 7<"$code" 4<"$hook" 8>&1 9>&2 1>"$chain"
fi
if [ -p "$hold" ]; then
    # The stage lives as long as a process of this mount namespace does: this one
    # waits after the run's last process, until the server has opened the run's out/
    # through its root (then it closes the FIFO: EOF), or is killed with the run. Its
    # pid and where out/ will be go to PIDFILE now, while the run folder is in view.
    # (No FIFO, as in the engine's probe: nothing to hand back, no holder.) The FIFO
    # is opened here, before the stage may cover the run folder (fd 6 is free until
    # the network's FIFOs); it does not wait: the server holds a writer.
    exec 6<"$hold"
    cat <&6 >/dev/null 2>&1 3>&- 4>&- 6<&- 7>&- 8>&- 9>&- &
    echo "$! ${moved:-$stage}/out" >"$holdpid"
    exec 6<&-
fi
if [ -n "$inputs" ]; then exec 5<"$inputs"; fi
# The font list is read now too: the stage may cover the folder it lies in.
if [ -n "$fonts" ]; then fonts_text=$(cat "$fonts"); fi
mount --all --fstab "$fstab"
if [ -n "$inputs" ]; then exec 5<&-; fi
if [ -n "$unshare" ]; then
    # The run's network namespace, bound to a file of its private tmpfs; the process
    # that makes it blocks the host's networks there before slirp4netns gives it a
    # way out (a prohibit route needs no interface).
    : >"$stage/netns"
    "$unshare" --net="$stage/netns" "$ip" -batch - <<ROUTES
$routes
ROUTES
    mkfifo "$stage/ready" "$stage/done"
    # slirp4netns gives it a stack of its own; it exits once the run's last process
    # closed the exit FIFO (fd 6), so nothing of it outlives the run; it never holds
    # the run's own output. It starts while `install` runs: its shell opens the ready
    # FIFO, then the exit FIFO, each meeting this shell's open of it (same order: no
    # deadlock); this shell reads "1" from fd 5 after `install`, or EOF if it died.
    "$slirp" --configure --disable-host-loopback --enable-sandbox --enable-seccomp \
        --netns-type=path --ready-fd=5 --exit-fd=6 "$stage/netns" tap0 \
        5>"$stage/ready" 6<"$stage/done" </dev/null >/dev/null 2>&1 8>&- 9>&- &
    exec 5<"$stage/ready" 6>"$stage/done"
fi
# The writable folders are the run's alone (0700), as the run folder on the host; its
# out/ (bound at out/ in the run folder) can be listed by the server, which reads it
# after the run; a copy of the font list is the run's own too.
mpl=${fonts:+$stage/run/.matplotlib}
if [ -n "$owner" ]; then
    install -d -m 0700 -o "${owner%:*}" -g "${owner#*:}" "$stage/run" "$stage/tmp" "$stage/shm" \
        ${mpl:+"$mpl"}
    install -d -m 0755 -o "${owner%:*}" -g "${owner#*:}" "$stage/out"
    if [ -n "$mpl" ]; then
        install -m 0600 -o "${owner%:*}" -g "${owner#*:}" /dev/stdin "$mpl/${fonts##*/}" <<TEXT
$fonts_text
TEXT
    fi
else
    install -d -m 0700 "$stage/run" "$stage/tmp" "$stage/shm" ${mpl:+"$mpl"}
    install -d -m 0755 "$stage/out"
    if [ -n "$mpl" ]; then
        install -m 0600 /dev/stdin "$mpl/${fonts##*/}" <<TEXT
$fonts_text
TEXT
    fi
fi
if [ -n "$unshare" ]; then
    read -r up <&5 || true
    exec 5<&-
    if [ "$up" != 1 ]; then
        echo "gitpilot sandbox: user-mode networking (slirp4netns) did not start" >&2
        exit 125
    fi
fi
if [ -n "$moved" ]; then mount --move "$stage" "$moved"; else moved=$stage; fi
if [ -n "$code" ]; then exec 2>&1; fi # bubblewrap's errors: the chain's output too
if [ -n "$unshare" ]; then exec "$nsenter" --net="$moved/netns" -- "$@"; fi
exec "$@"
