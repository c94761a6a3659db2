package settingfile

import "os"

// openNonblock is nothing on Windows, where opening a file never waits.
const openNonblock = 0

// owner: Windows says no uid of a file; its ACL is its own matter.
func owner(os.FileInfo) (int, bool) { return 0, false }
