// The floor of any Swift command-line tool: link Foundation, print one line.
import Foundation

print(FileManager.default.currentDirectoryPath.isEmpty ? "" : "hello")
