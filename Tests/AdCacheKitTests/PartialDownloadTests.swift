import Foundation
import TestSupport
import Testing

@testable import AdCacheKit

@Suite struct PartialDownloadTests {
    @Test func resumesOnlyAFileWhoseVersionIsKnown() throws {
        let dir = TempDir(); defer { dir.remove() }
        let p = PartialDownload(path: dir.file("x.part"))
        #expect(p.resumePoint() == nil)   // nothing there
        let fd = p.openFresh(validator: "\"v1\"")
        #expect(fd >= 0)
        _ = [UInt8](repeating: 7, count: 100).withUnsafeBytes { FileIO.writeAll(fd, $0) }
        close(fd)
        #expect(p.resumePoint()?.offset == 100)
        #expect(p.resumePoint()?.validator == "\"v1\"")
        // A response without a validator cannot be resumed, and is not kept after a failure.
        close(p.openFresh(validator: nil))
        #expect(p.resumePoint() == nil && !p.isResumable)
        p.keepIfResumable()
        #expect(!FileIO.exists(p.path))
    }

    @Test func commitMovesTheFileAndForgetsTheValidator() throws {
        let dir = TempDir(); defer { dir.remove() }
        let p = PartialDownload(path: dir.file("y.part"))
        close(p.openFresh(validator: "W"))
        p.keepIfResumable()
        #expect(FileIO.exists(p.path) && p.isResumable)
        #expect(p.commit(to: dir.file("final.jpg")))
        #expect(FileIO.exists(dir.file("final.jpg")) && !FileIO.exists(p.path) && !FileIO.exists(p.validatorPath))
        #expect(!p.commit(to: dir.file("again.jpg")))
        close(p.openFresh(validator: "W"))
        p.discard()
        #expect(FileIO.list(dir.path) == ["final.jpg"])
    }
}
