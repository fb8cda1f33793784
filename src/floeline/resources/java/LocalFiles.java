package floeline;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (file:) without a child process per call.
 *
 * <p>Without Hadoop's native library (not shipped with PySpark), RawLocalFileSystem runs
 * `chmod` for every file it creates with a permission and `readlink` for every
 * getFileLinkStatus (FileContext's rename asks it of both paths). Delta's log store and
 * Spark's streaming checkpoint write through FileContext, so each Delta commit and each
 * micro-batch started about a dozen processes from the JVM (measured: ~7 ms each on an
 * idle 2-core machine; a 100-row append took ~0.25 s). Here the same two calls use
 * java.nio, with the same results: the permission bits set, and the status of the path
 * (Hadoop's readlink is given the qualified "file:/..." string, which never resolves, so
 * it already returned the plain status; a real symbolic link still goes to Hadoop).
 *
 * <p>Wired in by spark.hadoop.fs.file.impl (FileSystem) and
 * spark.hadoop.fs.AbstractFileSystem.file.impl (FileContext).
 */
public final class LocalFiles {
    private LocalFiles() {}

    /** The raw file system: the two calls above without a process. */
    public static class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            short mode = permission.toShort();
            if ((mode & ~0777) != 0) {  // sticky bit and the like: Hadoop's own way
                super.setPermission(p, permission);
                return;
            }
            Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(mode));
        }

        @Override
        public FileStatus getFileLinkStatus(Path f) throws IOException {
            File file = pathToFile(f);
            if (Files.isSymbolicLink(file.toPath())) {
                return super.getFileLinkStatus(f);
            }
            return getFileStatus(f);
        }

        private static Set<PosixFilePermission> posix(short mode) {
            Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
            PosixFilePermission[] bits = {
                PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
                PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
                PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
            };
            for (int i = 0; i < bits.length; i++) {
                if ((mode & (1 << i)) != 0) {
                    set.add(bits[i]);
                }
            }
            return set;
        }
    }

    /** fs.file.impl: Hadoop's checksummed LocalFileSystem over Raw. */
    public static class Checksummed extends LocalFileSystem {
        public Checksummed() {
            super(new Raw());
        }
    }

    /** FileContext's raw local file system over Raw (as Hadoop's RawLocalFs). */
    public static class RawContext extends DelegateToFileSystem {
        public RawContext(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(FsConstants.LOCAL_FS_URI, new Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;  // no port, as RawLocalFs
        }

        @Override
        @SuppressWarnings("deprecation")
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;  // any local path, as RawLocalFs
        }
    }

    /** fs.AbstractFileSystem.file.impl: the checksummed FileContext file system (as
     * Hadoop's LocalFs) over RawContext. */
    public static class Context extends ChecksumFs {
        public Context(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(new RawContext(uri, conf));
        }
    }
}
