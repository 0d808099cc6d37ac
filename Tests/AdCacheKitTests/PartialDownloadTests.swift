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

/// The digest of a big download is computed on another thread, a group of chunks at a time
/// (EasyTransfer): whatever the size — within the inline part, just past it, whole groups,
/// a group cut short, a last chunk of one byte — the digest and the file are the body's.
@Suite struct DownloadDigestTests {
    @Test(arguments: [
        1, 200_000, 4 << 20, (4 << 20) + 1, (4 << 20) + (128 << 10) * 4, (4 << 20) + (128 << 10) * 9 + 1,
        (6 << 20) + 12_345,
    ])
    func theDigestIsTheBodysAtEverySize(_ size: Int) throws {
        var body = [UInt8](repeating: 0, count: size)
        var x: UInt32 = 2_463_534_242
        for i in body.indices {
            x ^= x << 13; x ^= x >> 17; x ^= x << 5
            body[i] = UInt8(truncatingIfNeeded: x)
        }
        let served = body
        let server = try LoopbackServer { r in .file(served, for: r, etag: "\"v\"") }
        defer { server.stop() }
        let dir = TempDir(); defer { dir.remove() }
        let partial = PartialDownload(file: CacheDirectory(path: dir.path).file("d.part"))
        var response = TransferResponse()
        TransferEngine(settings: TransferSettings()).run(
            [TransferRequest(url: server.url("/d.bin"), destination: .file(partial), maxBytes: 1 << 30)]
        ) { _, r in response = r }
        #expect(response.error == nil, "\(String(describing: response.error))")
        #expect(response.fileBytes == Int64(size))
        #expect(response.fileSha256 == Media.sha256(body))
        #expect(try FileIO.read(partial.path, limit: 1 << 30) == body)
    }
}
