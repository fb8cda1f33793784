package floeline;

/**
 * Ends this JVM at once when the Python process that started it is gone (see spark.py's
 * _launch_jvm_in_own_session). Python killed outright (SIGKILL, the OOM killer) closes the
 * JVM's stdin, and PySpark's gateway then calls System.exit, whose shutdown hooks take
 * seconds while the streaming query keeps running: long enough to plan a batch or finish
 * a Delta commit beside a connector restarted on the same checkpoint and table. A halt runs
 * no hooks and stops every thread. (Linux's PR_SET_PDEATHSIG would do it in the kernel,
 * but not every sandbox honours it.)
 */
public final class ParentWatch {
    private static boolean started;

    private ParentWatch() {
    }

    /** Watch `parentPid` (this JVM's parent) every 100 ms, from a daemon thread; once per JVM. */
    public static synchronized void start(long parentPid) {
        if (started) {
            return;
        }
        started = true;
        Thread watch = new Thread(() -> {
            while (true) {
                // Re-parented (to init or a subreaper): Python has exited, even as a zombie.
                // No parent found (unreadable for a moment) proves nothing: look again.
                long parent = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(parentPid);
                if (parent != parentPid) {
                    Runtime.getRuntime().halt(137);
                }
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "floeline-parent-watch");
        watch.setDaemon(true);
        watch.start();
    }
}
