package transportinternal_test

import (
	"testing"

	"github.com/warrenipc/warren/internal/transportinternal"
	_ "github.com/warrenipc/warren/transport" // sets the functions
)

func TestSet(t *testing.T) {
	if transportinternal.WSSocket == nil || transportinternal.WSHandshake == nil ||
		transportinternal.WSDetach == nil || transportinternal.AdmitPeer == nil {
		t.Fatal("package transport left a function unset")
	}
}
