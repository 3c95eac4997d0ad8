package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/dburl"
)

// Creating a test's database and dropping it take the shared server about
// as long as a short test itself: a drop waits for a checkpoint of the
// whole server. A package whose TestMain runs its tests through Background
// has both done off its tests' paths: NewDB hands out a database made
// ahead and makes the next one, and a finished test's database is dropped
// by a background dropper, which the package waits for once its tests are
// done.

// TestingM is what Background needs of a *testing.M (goleak's TestingM too).
type TestingM interface{ Run() int }

// spares is how many databases are made ahead at most.
const spares = 2

// droppers is how many databases are dropped at once.
const droppers = 8

// bg is the state of a package running under Background.
var bg struct {
	mu      gosync.Mutex
	on      bool
	drops   chan dropReq
	dropped gosync.WaitGroup
	spares  chan string // made ahead from the template, not handed out
	making  int         // spares being made
	made    gosync.WaitGroup
}

type dropReq struct{ admin, name string }

// Background returns m with its Run doing what the package comment of this
// file says; use it in TestMain, around anything else that wraps m:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(dbtest.Background(m)) }
func Background(m TestingM) TestingM { return runner{m} }

type runner struct{ m TestingM }

func (r runner) Run() int {
	bg.mu.Lock()
	bg.on = true
	bg.drops = make(chan dropReq, 4096)
	bg.spares = make(chan string, spares)
	bg.mu.Unlock()
	for range droppers {
		bg.dropped.Add(1)
		go func() {
			defer bg.dropped.Done()
			for d := range bg.drops {
				_ = dburl.DropVia(context.Background(), d.admin, d.name)
			}
		}()
	}
	code := r.m.Run()

	bg.mu.Lock()
	bg.on = false
	bg.mu.Unlock()
	bg.made.Wait()
	close(bg.spares)
	admin := serverURL // set once a test made a database
	for name := range bg.spares {
		bg.drops <- dropReq{admin: admin, name: name}
	}
	close(bg.drops)
	bg.dropped.Wait()
	removePrivateTemplate()
	return code
}

// dropLater drops the database after the test, in the background when the
// package runs under Background and at once otherwise.
func dropLater(admin, name string) {
	bg.mu.Lock()
	on := bg.on
	bg.mu.Unlock()
	if on {
		bg.drops <- dropReq{admin: admin, name: name}
		return
	}
	_ = dburl.DropVia(context.Background(), admin, name)
}

// takeSpare returns a database made ahead, if there is one, and starts
// making the next.
func takeSpare(admin, tpl string) (string, bool) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if !bg.on {
		return "", false
	}
	var name string
	select {
	case name = <-bg.spares:
	default:
	}
	if len(bg.spares)+bg.making < spares {
		bg.making++
		bg.made.Add(1)
		go makeSpare(admin, tpl)
	}
	return name, name != ""
}

// makeSpare creates a database from the template for a later test. On an
// error it makes none: that test creates its own.
func makeSpare(admin, tpl string) {
	defer bg.made.Done()
	name, err := create(admin, tpl)
	bg.mu.Lock()
	defer bg.mu.Unlock()
	bg.making--
	if err == nil {
		bg.spares <- name // never blocks: spares counts those being made
	}
}

// create creates a database from the template tpl and returns its name.
func create(admin, tpl string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := newName()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if err := createFromTemplate(ctx, conn, name, tpl); err != nil {
		return "", err
	}
	return name, nil
}

func newName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "bothy_test_" + hex.EncodeToString(b)
}
