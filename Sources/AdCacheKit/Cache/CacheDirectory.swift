#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The cache directory, held open: every file adcache opens, creates, renames, links or
/// deletes in it is named relative to this handle (`openat`, `renameat`, `linkat`,
/// `unlinkat`), always with `O_NOFOLLOW` — so that a member of a shared cache's group, who
/// may replace any name in it by a symbolic link, cannot make a more privileged user's run
/// open, truncate, write or delete anything outside it (SPEC §6). `assets/` and `partial/`
/// are entered only as real directories (`O_DIRECTORY | O_NOFOLLOW`); the only path taken
/// from outside is the directory itself. Nothing else in the library touches a cache path.
final class CacheDirectory: @unchecked Sendable {
    /// The folders adcache keeps files in.
    enum Folder: String, Sendable, CaseIterable {
        case top = ""
        case assets, partial

        /// Its place in `fds`.
        var slot: Int {
            switch self {
            case .top: return 0
            case .assets: return 1
            case .partial: return 2
            }
        }
    }

    /// The directory as given (absolute): for messages and for the paths `next` prints.
    let path: String
    private let warn: WarningSink
    private let lock = Lock()
    /// Each folder's descriptor by `Folder.slot`, -2 until opened (an array, not a dictionary:
    /// a launch instantiates no hashed generic type it can avoid).
    private var fds: [Int32] = [-2, -2, -2]
    private var warned: Set<String> = []

    init(path: String, warn: @escaping WarningSink = { _ in }) {
        self.path = path
        self.warn = warn
    }

    deinit {
        for fd in fds where fd >= 0 { close(fd) }
    }

    /// The path of a folder, for messages.
    func path(of folder: Folder) -> String {
        folder == .top ? path : path + "/" + folder.rawValue
    }

    /// A file of the cache.
    func file(_ name: String, in folder: Folder = .top) -> CacheFile {
        CacheFile(directory: self, folder: folder, name: name)
    }

    /// Says `message` once per run (per handle).
    func warnOnce(_ message: String) {
        lock.lock()
        let first = warned.insert(message).inserted
        lock.unlock()
        if first { warn(Diagnostic(.cache, message)) }
    }

    /// The folder's descriptor, opened on first use; -1 with errno set when it cannot be
    /// entered (it does not exist yet, or something other than a directory has its name).
    func fd(_ folder: Folder) -> Int32 {
        lock.lock()
        if fds[folder.slot] >= 0 {
            let fd = fds[folder.slot]
            lock.unlock()
            return fd
        }
        lock.unlock()
        let fd: Int32
        if folder == .top {
            fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } else {
            let top = self.fd(.top)
            guard top >= 0 else { return -1 }
            fd = openat(top, folder.rawValue, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        }
        guard fd >= 0 else {
            let e = errno
            if folder != .top, e == ELOOP || e == ENOTDIR {
                warnOnce("\(path(of: folder)) is not a directory (a symbolic link?); not entered")
            }
            errno = e
            return -1
        }
        lock.lock()
        if fds[folder.slot] >= 0 {   // another thread opened it meanwhile
            let raced = fds[folder.slot]
            lock.unlock()
            close(fd)
            return raced
        }
        fds[folder.slot] = fd
        lock.unlock()
        if folder == .top, let message = ownershipWarning(fd) { warnOnce(message) }
        return fd
    }

    /// As git's `safe.directory`: root works in a directory that others can write, but says so.
    private func ownershipWarning(_ fd: Int32) -> String? {
        guard geteuid() == 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        if st.st_uid != 0 {
            let owner = getpwuid(st.st_uid).map { String(cString: $0.pointee.pw_name) } ?? "uid \(st.st_uid)"
            return "the cache belongs to user \(owner); running as root"
        }
        if st.st_mode & 0o020 != 0 {
            let group = getgrgid(st.st_gid).map { String(cString: $0.pointee.gr_name) } ?? "gid \(st.st_gid)"
            return "the cache is writable by group \(group); running as root"
        }
        return st.st_mode & 0o002 != 0 ? "the cache is writable by every user; running as root" : nil
    }

    /// True when the directory exists (as a directory).
    var exists: Bool { fd(.top) >= 0 }

    /// Creates the directory (and its parents) and its folders. A symbolic link or a file
    /// where a folder belongs is removed (it is not ours; the link's target is untouched) and
    /// a real directory made, with a warning.
    func prepare() throws {
        try FileIO.makeDirectory(path)
        let top = fd(.top)
        guard top >= 0 else {
            throw AdCacheError.cacheUnwritable("cannot open the cache directory \(path): \(FileIO.errnoText())")
        }
        let shared = isShared
        for folder in [Folder.assets, .partial] {
            if fd(folder) >= 0 { continue }
            var st = stat()
            if fstatat(top, folder.rawValue, &st, AT_SYMLINK_NOFOLLOW) == 0 {
                guard (st.st_mode & S_IFMT) != S_IFDIR, unlinkat(top, folder.rawValue, 0) == 0 else {
                    throw AdCacheError.cacheUnwritable(
                        "cannot use \(path(of: folder)): \(FileIO.errnoText())")
                }
                warn(Diagnostic(.cache, "\(path(of: folder)) was not a directory; replaced it with one"))
            }
            if mkdirat(top, folder.rawValue, 0o777) != 0, errno != EEXIST {
                throw AdCacheError.cacheUnwritable("cannot create directory \(path(of: folder)): \(FileIO.errnoText())")
            }
            let sub = fd(folder)
            guard sub >= 0 else {
                throw AdCacheError.cacheUnwritable("cannot open \(path(of: folder)): \(FileIO.errnoText())")
            }
            if shared, fstat(sub, &st) == 0, st.st_mode & 0o2070 != 0o2070 {
                fchmod(sub, (st.st_mode & 0o7777) | 0o070 | S_ISGID)
            }
        }
    }

    /// True when the directory has the setgid bit: the sign of a cache shared through a group
    /// (SPEC §3): what adcache creates there is group-readable and group-writable.
    var isShared: Bool {
        var st = stat()
        let top = fd(.top)
        return top >= 0 && fstat(top, &st) == 0 && st.st_mode & S_ISGID != 0
    }

    /// The names in a folder (not . or ..), read through the handle; empty when it cannot be
    /// entered.
    func list(_ folder: Folder) -> [String] {
        let fd = self.fd(folder)
        guard fd >= 0 else { return [] }
        let copy = dup(fd)
        guard copy >= 0, let dir = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            return []
        }
        defer { closedir(dir) }
        rewinddir(dir)
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// fsync of a folder, so that a rename or unlink in it survives a power loss.
    func sync(_ folder: Folder) {
        let fd = self.fd(folder)
        if fd >= 0 { fsync(fd) }
    }
}

/// A file in the cache directory: a folder of its handle and a name (never a path).
struct CacheFile: Sendable, Hashable, CustomStringConvertible {
    let directory: CacheDirectory
    let folder: CacheDirectory.Folder
    let name: String

    /// The full path, for messages and for what `next` prints.
    var path: String { directory.path(of: folder) + "/" + name }
    var description: String { path }

    static func == (a: CacheFile, b: CacheFile) -> Bool {
        a.directory === b.directory && a.folder == b.folder && a.name == b.name
    }

    func hash(into h: inout Hasher) {
        h.combine(folder)
        h.combine(name)
    }

    /// A sibling in the same folder.
    func sibling(_ name: String) -> CacheFile { CacheFile(directory: directory, folder: folder, name: name) }

    private var dirfd: Int32 { directory.fd(folder) }

    // MARK: Looking

    /// lstat: the entry itself, never what a link points to.
    func status() -> stat? {
        let fd = dirfd
        guard fd >= 0 else { return nil }
        var st = stat()
        return fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st : nil
    }

    /// True when the name exists (whatever it is: a link or a fifo counts, so that a reader
    /// treats it as damaged rather than as absent).
    var exists: Bool { status() != nil }

    /// Device, inode, size and modification time of a regular file, or nil.
    var identity: CacheStore.FileIdentity? {
        guard let st = status(), (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return CacheStore.FileIdentity(st)
    }

    /// True when the name is a symbolic link.
    var isLink: Bool { status().map { ($0.st_mode & S_IFMT) == S_IFLNK } ?? false }

    /// The size of a regular file, or nil.
    var size: Int64? {
        guard let st = status(), (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(st.st_size)
    }

    /// A regular file's size and modification time (nanoseconds), or nil.
    var stamp: (size: Int64, mtime: Int64)? {
        guard let st = status(), (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return (Int64(st.st_size), FileIO.nanoseconds(st.st_mtim))
    }

    // MARK: Opening

    /// Opens the file itself (`O_NOFOLLOW`): -1 with errno set (`ELOOP` for a link). It must
    /// be a regular file; a fifo planted in its place cannot block us (`O_NONBLOCK`, which a
    /// regular file ignores: the open does not wait, and a write-only one fails `ENXIO`).
    func open(_ flags: Int32, mode: mode_t = 0o666) -> Int32 {
        let dir = dirfd
        guard dir >= 0 else { return -1 }
        let fd = openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode)
        guard fd >= 0 else { return -1 }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            errno = EINVAL
            return -1
        }
        // Group-writable in a shared cache — only a file of one name, and our own: a hard
        // link a group member planted to a file elsewhere is never changed (SPEC §6 v4; the
        // caller replaces it), checked on the open descriptor.
        if flags & O_CREAT != 0, directory.isShared, st.st_mode & 0o060 != 0o060, st.st_nlink == 1,
            st.st_uid == geteuid()
        {
            fchmod(fd, (st.st_mode & 0o7777) | 0o060)
        }
        return fd
    }

    /// A file adcache writes in place (the journal, a lock file, a partial download): opened
    /// without following a link, and only when it is a regular file with one name. What is
    /// in the way (a link, a fifo, a second hard link) is not ours: it is removed — the name
    /// only, never what it points to — with a warning, and the file made anew.
    func openForWriting(_ flags: Int32) -> Int32 {
        var fd = open(flags)
        if fd >= 0 {
            var st = stat()
            if fstat(fd, &st) == 0, st.st_nlink <= 1 { return fd }
            close(fd)
            errno = EMLINK
        } else if errno == ENOENT || flags & O_CREAT == 0 {
            return -1
        }
        let e = errno
        guard [ELOOP, EINVAL, EMLINK, ENXIO, EISDIR].contains(e), exists else {
            errno = e
            return -1
        }
        // An empty directory in the way goes too (unlinkat never follows, nor empties one).
        guard remove() || unlinkat(dirfd, name, AT_REMOVEDIR) == 0 else { return -1 }
        directory.warnOnce("\(path) was not a regular file of adcache's (\(FileIO.errnoText(e))); replaced it")
        fd = open(flags | O_CREAT | O_EXCL)
        return fd
    }

    /// A new file of this name: what was there (a crash's leftover, or a planted link) is
    /// unlinked first and the file created with `O_EXCL`, so that no existing file is ever
    /// truncated or written through.
    func createFresh() -> Int32 {
        let dir = dirfd
        guard dir >= 0 else { return -1 }
        if unlinkat(dir, name, 0) != 0, errno != ENOENT, unlinkat(dir, name, AT_REMOVEDIR) != 0 { return -1 }
        return open(O_WRONLY | O_CREAT | O_EXCL)
    }

    // MARK: Reading

    /// The whole file, refusing one larger than `limit` bytes. A link is not read (`ELOOP`).
    func read(limit: Int64 = .max) throws -> [UInt8] {
        let fd = open(O_RDONLY)
        guard fd >= 0 else { throw AdCacheError.io("cannot read \(path): \(FileIO.errnoText())") }
        defer { close(fd) }
        return try FileIO.read(fd: fd, path: path, limit: limit)
    }

    /// The first `count` bytes (fewer if it is shorter).
    func head(count: Int = 32) -> [UInt8] {
        let fd = open(O_RDONLY)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        return FileIO.head(fd: fd, count: count)
    }

    /// Calls `body` with each block of the file, in order.
    func forEachBlock(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let fd = open(O_RDONLY)
        guard fd >= 0 else { throw AdCacheError.io("cannot read \(path): \(FileIO.errnoText())") }
        defer { close(fd) }
        try FileIO.forEachBlock(fd: fd, path: path, body)
    }

    // MARK: Changing

    /// unlinkat: the name goes (a link, never its target). True when it did.
    @discardableResult
    func remove() -> Bool {
        let fd = dirfd
        return fd >= 0 && unlinkat(fd, name, 0) == 0
    }

    /// The name goes, whatever is there (a file, a link, an empty directory); true when
    /// nothing is left by that name.
    @discardableResult
    func removeEntry() -> Bool {
        let fd = dirfd
        guard fd >= 0 else { return false }
        return unlinkat(fd, name, 0) == 0 || errno == ENOENT || unlinkat(fd, name, AT_REMOVEDIR) == 0
    }

    /// renameat within the cache; false with errno set.
    func rename(to target: CacheFile) -> Bool {
        let from = dirfd
        let to = target.directory.fd(target.folder)
        return from >= 0 && to >= 0 && renameat(from, name, to, target.name) == 0
    }

    /// linkat (the entry itself, never what a link points to); false with errno set.
    func link(to target: CacheFile) -> Bool {
        let from = dirfd
        let to = target.directory.fd(target.folder)
        return from >= 0 && to >= 0 && linkat(from, name, to, target.name, 0) == 0
    }

    /// Sets the modification time to now (the entry itself, never what a link points to).
    @discardableResult
    func touch() -> Bool {
        let fd = dirfd
        return fd >= 0 && utimensat(fd, name, nil, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// Cuts a regular file to `length` (a partial download's distrusted tail).
    func truncate(to length: Int64) -> Bool {
        let fd = openForWriting(O_WRONLY)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return ftruncate(fd, off_t(length)) == 0
    }

    /// Replaces the file with `bytes` so that a crash at any instant leaves the old file or
    /// the new one: write `<name>.tmp` (created fresh), fsync it, rename it over the target,
    /// fsync the folder. Callers serialise writes to one name (the index lock), so a
    /// temporary that a crash leaves behind is replaced, never piles up. `beforeReplacing`
    /// runs once the temporary is durable, just before it takes the name. `durable: false`
    /// leaves out both fsyncs: readers never see a torn file, but a crash may lose it (or
    /// leave it empty), for a file whose loss costs nothing but time (the selection digest).
    func writeAtomically(_ bytes: [UInt8], durable: Bool = true, beforeReplacing: () -> Void = {}) throws {
        let temp = sibling(name + ".tmp")
        let fd = temp.createFresh()
        guard fd >= 0 else { throw FileIO.writeError("cannot write \(temp.path)") }
        var failure: Int32? = bytes.withUnsafeBytes { FileIO.writeAll(fd, $0) }
        if failure == nil, durable, fsync(fd) != 0 { failure = errno }
        if close(fd) != 0, failure == nil { failure = errno }
        if let failure {
            temp.remove()
            throw FileIO.writeError("cannot write \(path)", failure)
        }
        beforeReplacing()
        CrashPoint.reach("write.\(name).beforeRename")
        guard temp.rename(to: self) else {
            let e = errno
            temp.remove()
            throw FileIO.writeError("cannot replace \(path)", e)
        }
        if durable { directory.sync(folder) }
    }

    /// Writes a small file with no durability promise (a hint that may be lost in a crash).
    @discardableResult
    func writeSimply(_ bytes: [UInt8]) -> Bool {
        let fd = createFresh()
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return bytes.withUnsafeBytes { FileIO.writeAll(fd, $0) } == nil
    }
}
