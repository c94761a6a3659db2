package cmd

// openNonblock is nothing on Windows, where opening a file never waits.
const openNonblock = 0
