// Command gendocs writes semrun's man pages and shell completions for the
// release archives and packages:
//
//	go run ./internal/gendocs DIR
//
// It replaces DIR/man (gzipped man pages, one a command) and
// DIR/completions (semrun.bash, semrun.zsh, semrun.fish). The pages are
// dated by SOURCE_DATE_EPOCH (seconds) when it is set and positive, so that
// a release's are reproducible; a snapshot without a commit time gets 0 or
// less, and today's date.
package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/semrun/semrun/cmd"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendocs DIR")
		os.Exit(2)
	}
	if err := generate(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
}

// generate writes the man pages and completions into dir.
func generate(dir string) error {
	root := cmd.NewCmdRoot(cmd.System())
	root.DisableAutoGenTag = true   // no generation date in the pages' text
	root.InitDefaultCompletionCmd() // cobra adds it only when it runs
	date, err := sourceDate()
	if err != nil {
		return err
	}
	if err := genMan(root, date, filepath.Join(dir, "man")); err != nil {
		return err
	}
	return genCompletions(root, filepath.Join(dir, "completions"))
}

// sourceDate is the date of the pages: SOURCE_DATE_EPOCH, else now.
func sourceDate() (time.Time, error) {
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		return time.Now(), nil
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%s: not a number of seconds", epoch)
	}
	if sec <= 0 {
		return time.Now(), nil
	}
	return time.Unix(sec, 0).UTC(), nil
}

// genMan writes one page a command into dir, gzipped, as packages ship them.
func genMan(root *cobra.Command, date time.Time, dir string) error {
	if err := fresh(dir); err != nil {
		return err
	}
	header := &doc.GenManHeader{Section: "1", Manual: "semrun manual", Source: "semrun", Date: &date}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return err
	}
	if err := addSections(filepath.Join(dir, root.Name()+".1"), cmd.ManSections(root)); err != nil {
		return err
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err != nil {
		return err
	}
	for _, page := range pages {
		if err := gzipFile(page); err != nil {
			return err
		}
	}
	return nil
}

// addSections writes sections into the man page at path, where man pages
// have them: before EXAMPLE (or SEE ALSO), else at the end. cobra's
// generator has no hook for sections of its own.
func addSections(path string, sections []cmd.ManSection) error {
	page, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, sec := range sections {
		macro := ".SH"
		if sec.Sub {
			macro = ".SS"
		}
		fmt.Fprintf(&b, "%s %s\n", macro, roffQuote(sec.Title))
		if sec.Intro != "" {
			fmt.Fprintf(&b, ".PP\n%s\n", roffText(sec.Intro))
		}
		for _, e := range sec.Entries {
			fmt.Fprintf(&b, ".TP\n\\fB%s\\fP\n%s\n", roffText(e.Term), roffText(e.Text))
		}
		b.WriteString("\n")
	}
	text := string(page)
	at := len(text)
	for _, next := range []string{"\n.SH EXAMPLE\n", "\n.SH SEE ALSO\n"} {
		if i := strings.Index(text, next); i >= 0 {
			at = i + 1
			break
		}
	}
	return os.WriteFile(path, []byte(text[:at]+b.String()+text[at:]), 0o644)
}

// roffText is text as roff prints it: a backslash escaped, and a line that
// would start with a control character (. or ') made plain.
func roffText(text string) string {
	text = strings.ReplaceAll(text, `\`, `\e`)
	if strings.HasPrefix(text, ".") || strings.HasPrefix(text, "'") {
		text = `\&` + text
	}
	return text
}

// roffQuote is a macro's argument: quoted, as a title may hold spaces.
func roffQuote(text string) string {
	return `"` + strings.ReplaceAll(roffText(text), `"`, `\(dq`) + `"`
}

// gzipFile replaces path with path.gz. The gzip header carries no name
// and no time, so the same page always gives the same bytes.
func gzipFile(path string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(path + ".gz")
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(out, gzip.BestCompression)
	if err != nil {
		out.Close()
		return err
	}
	_, err = io.Copy(zw, in)
	if closeErr := zw.Close(); err == nil {
		err = closeErr
	}
	if closeErr := out.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	return os.Remove(path)
}

// genCompletions writes the bash, zsh and fish completion scripts into dir.
func genCompletions(root *cobra.Command, dir string) error {
	if err := fresh(dir); err != nil {
		return err
	}
	for name, gen := range map[string]func(io.Writer) error{
		"semrun.bash": func(w io.Writer) error { return root.GenBashCompletionV2(w, true) },
		"semrun.zsh":  root.GenZshCompletion,
		"semrun.fish": func(w io.Writer) error { return root.GenFishCompletion(w, true) },
	} {
		if err := writeFile(filepath.Join(dir, name), gen); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, gen func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gen(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// fresh empties dir, or makes it: a page of a command that is gone must
// not ship.
func fresh(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}
