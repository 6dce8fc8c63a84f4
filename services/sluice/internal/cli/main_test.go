package cli

import (
	"testing"

	"github.com/sluice-cdc/sluice/shared/chtest"
)

func TestMain(m *testing.M) { chtest.Main(m) }
