package protocol

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// words are the names Lua code src may use, leaving out comments, strings
// and fields (a.name, a:name): more than it uses, never fewer, which at
// worst keeps a piece of lib.lua a script does not need.
func words(src string) []string {
	var out []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '-' && strings.HasPrefix(src[i:], "--[") || c == '[' && strings.HasPrefix(src[i:], "[["):
			panic("a long string or comment: words cannot read it")
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '\'' || c == '"':
			for i++; i < len(src) && src[i] != c && src[i] != '\n'; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			i++
		case isNameByte(c):
			j := i + 1
			for j < len(src) && (isNameByte(src[j]) || (isDigit(c) && src[j] == '.')) {
				j++
			}
			field := i > 0 && (src[i-1] == ':' || (src[i-1] == '.' && (i < 2 || src[i-2] != '.')))
			if !field && !isDigit(c) {
				out = append(out, src[i:j])
			}
			i = j
		default:
			i++
		}
	}
	return out
}

// needsOf is what of lib.lua the script whose own file is body needs: the
// names it uses that a piece of lib.lua defines, what those pieces use, and
// so on, with what the pieces that define nothing (run for their effect)
// use; sorted.
func needsOf(t *testing.T, body string) []string {
	t.Helper()
	pieces, err := libPieces(libLua)
	if err != nil {
		t.Fatal(err)
	}
	definer := map[string]int{}
	for i, p := range pieces {
		for _, n := range p.defines {
			definer[n] = i
		}
	}
	needs := map[string]bool{}
	var need func(names []string)
	need = func(names []string) {
		for _, n := range names {
			if p, ok := definer[n]; ok && !needs[n] {
				for _, d := range pieces[p].defines {
					needs[d] = true
				}
				need(words(pieces[p].text))
			}
		}
	}
	for _, p := range pieces {
		if len(p.defines) == 0 {
			need(words(p.text))
		}
	}
	need(words(body))
	out := make([]string, 0, len(needs))
	for n := range needs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// libNeeds is each script's part of lib.lua, found from the sources: what
// to write in closure.go when a change to lib.lua or a script changed it.
func TestLibNeedsAreWhatScriptsUse(t *testing.T) {
	var want strings.Builder
	stale := false
	for _, s := range Scripts() {
		needs := strings.Join(needsOf(t, s.body), " ")
		fmt.Fprintf(&want, "\t%q: %q,\n", s.name, needs)
		if libNeeds[s.name] != needs {
			stale = true
			t.Errorf("%s needs of lib.lua:\n%s\nlibNeeds says:\n%s", s.name, needs, libNeeds[s.name])
		}
	}
	if stale || len(libNeeds) != len(Scripts()) {
		t.Errorf("libNeeds in closure.go is not what the scripts use; it should be:\nvar libNeeds = map[string]string{\n%s}", want.String())
	}
}

// luaGlobals are the globals Redis gives a script that the scripts may use.
var luaGlobals = map[string]bool{
	"KEYS": true, "ARGV": true, "redis": true, "string": true, "math": true, "table": true, "type": true,
	"tonumber": true, "tostring": true, "pairs": true, "ipairs": true, "unpack": true, "pcall": true,
	"error": true, "select": true,
}

// Every script, as sent, compiles, and reads and writes no global but
// those Redis gives it: a function of lib.lua a script calls and does not
// carry would be a global, nil when the call comes.
func TestScriptsDefineWhatTheyCall(t *testing.T) {
	for _, s := range Scripts() {
		chunk, err := parse.Parse(strings.NewReader(s.Source()), s.name)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		proto, err := lua.Compile(chunk, s.name)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := map[string]bool{}
		globals(proto, got)
		if !got["redis"] || !got["KEYS"] {
			t.Fatalf("%s: no global redis or KEYS found: the bytecode is not read right", s.name)
		}
		for name := range got {
			if !luaGlobals[name] {
				t.Errorf("%s uses %s, which it does not define", s.name, name)
			}
		}
	}
}

// globals adds to got the names of the globals that p and the functions
// in it read or write. An instruction is gopher-lua's: its opcode in the
// top 6 bits, Bx (a constant's index) in the low 18.
func globals(p *lua.FunctionProto, got map[string]bool) {
	for _, inst := range p.Code {
		if op := int(inst >> 26); op == lua.OP_GETGLOBAL || op == lua.OP_SETGLOBAL {
			got[p.Constants[inst&0x3ffff].String()] = true
		}
	}
	for _, f := range p.FunctionPrototypes {
		globals(f, got)
	}
}

// libPieces reads lib.lua whole, and refuses what it cannot split: a
// function whose end is not on a line of its own in the first column.
func TestLibPieces(t *testing.T) {
	pieces, err := libPieces(libLua)
	if err != nil {
		t.Fatal(err)
	}
	var whole strings.Builder
	for _, p := range pieces {
		whole.WriteString(p.text)
	}
	if whole.String() != libLua {
		t.Errorf("lib.lua's pieces do not make lib.lua")
	}
	for _, lib := range []string{
		"local function a()\n  return 1\n",
		"local function a() return 1 end\nlocal function b()\n  return 2\nend\n",
		"local 1x = 2\n",
	} {
		if _, err := libPieces(lib); err == nil {
			t.Errorf("libPieces(%q): got nil, want an error", lib)
		}
	}
	got, err := libPieces("-- a\nlocal x = 1\n\n-- b\nlocal function f()\n  return x\nend\nif x then f() end\n-- end\n")
	if err != nil || len(got) != 4 || got[0].text != "-- a\nlocal x = 1\n\n" || got[1].text != "-- b\nlocal function f()\n  return x\nend\n" ||
		len(got[2].defines) != 0 || got[3].text != "-- end\n" {
		t.Errorf("libPieces: got %+v, %v", got, err)
	}
}
