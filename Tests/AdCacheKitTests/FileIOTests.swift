import AdCacheKit
import Foundation
import TestSupport
import Testing

@Suite struct FileIOTests {
    /// `FileIO.read` reads straight into an array of the file's size: every size round the
    /// edges comes back whole, a file over the limit is refused, and a file whose size the
    /// kernel does not know beforehand (procfs says 0) is read whole all the same.
    @Test func readGivesTheWholeFileAndKeepsItsLimit() throws {
        let dir = TempDir()
        defer { dir.remove() }
        var rng = SystemRandomNumberGenerator()
        for size in [0, 1, 4095, 65_536, 65_537, 1_000_003] {
            let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let path = dir.path + "/f\(size)"
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            #expect(try FileIO.read(path) == bytes, "\(size) bytes")
            #expect(try FileIO.read(path, limit: Int64(size)) == bytes, "\(size) bytes, limit as large")
            if size > 0 {
                #expect(throws: AdCacheError.self) { try FileIO.read(path, limit: Int64(size - 1)) }
            }
        }
        let status = try FileIO.read("/proc/self/status")
        #expect(status.count > 100 && String(decoding: status, as: UTF8.self).hasPrefix("Name:"))
        #expect(throws: AdCacheError.self) { try FileIO.read("/proc/self/status", limit: 10) }
        #expect(throws: AdCacheError.self) { try FileIO.read(dir.path + "/missing") }
    }
}
