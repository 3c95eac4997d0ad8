package app_test

import (
	"os"
	"testing"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestMain makes and drops the tests' databases in the background
// (dbtest.Background).
func TestMain(m *testing.M) { os.Exit(dbtest.Background(m).Run()) }
