package daemon

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	daemonv1 "github.com/wcache/wcache/proto/wcache/daemon/v1"

	"github.com/wcache/wcache/core/fdchannel"
)

// TestAuthzTableCoversEveryOperation: every RPC of daemon.v1.Daemon and
// every descriptor channel op has exactly one row, and no row names
// something that does not exist: a new RPC cannot be added unclassified.
func TestAuthzTableCoversEveryOperation(t *testing.T) {
	var want []string
	for _, m := range daemonv1.Daemon_ServiceDesc.Methods {
		want = append(want, "/"+daemonv1.Daemon_ServiceDesc.ServiceName+"/"+m.MethodName)
	}
	for _, s := range daemonv1.Daemon_ServiceDesc.Streams {
		want = append(want, "/"+daemonv1.Daemon_ServiceDesc.ServiceName+"/"+s.StreamName)
	}
	// The descriptor channel's ops are numbered from 1; an op without a
	// name of its own is past the last.
	for op := fdchannel.Op(1); !strings.HasPrefix(op.String(), "op "); op++ {
		name := fdOpName(op)
		if name == "" {
			t.Errorf("descriptor channel op %s has no name in the authorization table (fdOpName)", op)
			continue
		}
		want = append(want, name)
	}
	var have []string
	for _, o := range operations() {
		if slices.Contains(have, o.name) {
			t.Errorf("operation %s has two rows", o.name)
		}
		have = append(have, o.name)
		if slices.Contains(o.allowed, ClassOther) {
			t.Errorf("operation %s is allowed to class other", o.name)
		}
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		t.Errorf("authorization table rows %v, want one per operation %v", have, want)
	}
}

// TestAuthorizeRowByRow: each row × class decides as the table says, a
// refusal names the operation, the class and the uid, and an operation
// missing from the table is refused to every class.
func TestAuthorizeRowByRow(t *testing.T) {
	a := authorizer{ownUID: 4242, allowUIDs: []uint32{4243}, allowGIDs: []uint32{4244}}
	peers := map[PeerClass]PeerInfo{
		ClassOwner:    {PID: 1, UID: 4242, GID: 4242},
		ClassRoot:     {PID: 2, UID: 0, GID: 0},
		ClassAllowUID: {PID: 3, UID: 4243, GID: 4243},
		ClassAllowGID: {PID: 4, UID: 4245, GID: 4244},
		ClassOther:    {PID: 5, UID: 4246, GID: 4246},
	}
	for class, p := range peers {
		if got := a.classOf(p); got != class {
			t.Fatalf("classOf(uid %d gid %d) = %s, want %s", p.UID, p.GID, got, class)
		}
	}
	for _, op := range operations() {
		for _, class := range peerClasses() {
			p := peers[class]
			err := a.authorize(op.name, p)
			if slices.Contains(op.allowed, class) {
				if err != nil {
					t.Errorf("%s × %s refused: %v", op.short, class, err)
				}
				continue
			}
			var ae *AuthzError
			if !errors.As(err, &ae) || ae.Class != class {
				t.Errorf("%s × %s: err = %v, want an *AuthzError of class %s", op.short, class, err, class)
				continue
			}
			msg := err.Error()
			uid := "uid " + strconv.FormatUint(uint64(p.UID), 10)
			if !strings.Contains(msg, op.short) || !strings.Contains(msg, uid) {
				t.Errorf("%s × %s: %q does not name the operation and %q", op.short, class, msg, uid)
			}
			if class != ClassOther && !strings.Contains(msg, string(class)) {
				t.Errorf("%s × %s: %q does not name the class", op.short, class, msg)
			}
		}
	}
	for _, class := range peerClasses() {
		if err := a.authorize("/wcache.daemon.v1.Daemon/Unknown", peers[class]); err == nil {
			t.Errorf("an unclassified operation was allowed to %s", class)
		}
	}
	// A root daemon: root is its owner, and may take over.
	root := authorizer{ownUID: 0}
	if err := root.authorize(fdOpTakeover, PeerInfo{UID: 0}); err != nil {
		t.Errorf("a root daemon refused its own takeover: %v", err)
	}
}

// TestAuthzDocTableMirrorsCode: docs/operations.md, "Who may do what",
// has one row per operation, with the classes the code allows.
func TestAuthzDocTableMirrorsCode(t *testing.T) {
	data, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### Who may do what\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "### Who may do what" section`)
	}
	section, _, _ = strings.Cut(section, "\n#")
	cols := []PeerClass{}
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "operation" {
			for _, c := range cells[1 : len(cells)-1] {
				cols = append(cols, PeerClass(strings.Trim(c, "`-")))
			}
			continue
		}
		if len(cells) != len(cols)+2 {
			t.Errorf("doc row %q: %d cells, want %d", line, len(cells), len(cols)+2)
			continue
		}
		rows[strings.Trim(cells[0], "`")] = cells[1 : len(cells)-1]
	}
	if !slices.Equal(cols, peerClasses()) {
		t.Fatalf("doc table columns %v, want %v", cols, peerClasses())
	}
	for _, op := range operations() {
		cells, ok := rows[op.short]
		if !ok {
			t.Errorf("docs/operations.md: no row for %s", op.short)
			continue
		}
		delete(rows, op.short)
		for i, class := range cols {
			want := "no"
			if slices.Contains(op.allowed, class) {
				want = "yes"
			}
			if cells[i] != want {
				t.Errorf("docs/operations.md: %s × %s is %q, the code says %q", op.short, class, cells[i], want)
			}
		}
	}
	for name := range rows {
		t.Errorf("docs/operations.md: row %q is no operation of the code's table", name)
	}
}
