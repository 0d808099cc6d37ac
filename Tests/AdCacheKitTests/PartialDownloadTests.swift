import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

@Suite struct PartialDownloadTests {
    @Test func resumesOnlyAFileWhoseVersionIsKnown() throws {
        let dir = TempDir(); defer { dir.remove() }
        let top = CacheDirectory(path: dir.path)
        let p = PartialDownload(file: top.file("x.part"))
        #expect(p.resumePoint() == nil)   // nothing there
        let fd = p.openFresh(validator: "\"v1\"")
        #expect(fd >= 0)
        _ = [UInt8](repeating: 7, count: 100_000).withUnsafeBytes { FileIO.writeAll(fd, $0) }
        close(fd)
        // The last 64 KiB are not trusted (a power cut may have left zeros): cut off.
        let point = p.resumePoint()
        #expect(point?.offset == Int64(100_000 - 65_536))
        #expect(point?.validator == "\"v1\"")
        #expect(Disk.size(p.path) == Int64(100_000 - 65_536))
        // A response without a validator cannot be resumed, and is not kept after a failure.
        close(p.openFresh(validator: nil))
        #expect(p.resumePoint() == nil && !p.isResumable)
        p.keepIfResumable()
        #expect(!Disk.exists(p.path))
    }

    @Test func commitMovesTheFileAndForgetsTheValidator() throws {
        let dir = TempDir(); defer { dir.remove() }
        let top = CacheDirectory(path: dir.path)
        let p = PartialDownload(file: top.file("y.part"))
        close(p.openFresh(validator: "W"))
        p.keepIfResumable()
        #expect(Disk.exists(p.path) && p.isResumable)
        #expect(p.commit(to: top.file("final.jpg")))
        #expect(Disk.exists(dir.file("final.jpg")) && !Disk.exists(p.path) && !Disk.exists(p.validator.path))
        #expect(!p.commit(to: top.file("again.jpg")))
        close(p.openFresh(validator: "W"))
        p.discard()
        #expect(Disk.list(dir.path) == ["final.jpg"])
    }
}
