package translate

import (
	"strconv"
)

func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
