package cmd

import "os"

// openNonblock is nothing on Windows, where opening a file never waits.
const openNonblock = 0

// fileOwner: Windows says no uid of a file; its ACL is its own matter.
func fileOwner(os.FileInfo) (int, bool) { return 0, false }
