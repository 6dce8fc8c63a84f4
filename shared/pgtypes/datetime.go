package pgtypes

import (
	"math"
)

// daysFromCivil is the day number (days since 1970-01-01) of a proleptic
// Gregorian date; y is astronomical (1 BC = 0).
func daysFromCivil(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := int64(m) + 9
	if m > 2 {
		mp = int64(m) - 3
	}
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y int64, m, d int) {
	z += 719468
	era := z
	if era < 0 {
		era -= 146096
	}
	era /= 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

func isLeap(y int64) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y int64, m int) int {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// digits reads n digits at t[i:], returning the value; ok is false if fewer.
func digits(t []byte, i, n int) (int, bool) {
	if i+n > len(t) {
		return 0, false
	}
	v := 0
	for _, c := range t[i : i+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// parseYMD reads "Y{4,7}-MM-DD" and returns the year as written, the month,
// the day and the index after them.
func parseYMD(t []byte) (y int64, m, d, i int, err error) {
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		y = y*10 + int64(t[i]-'0')
		i++
		if i > 7 {
			return 0, 0, 0, 0, ErrSyntax
		}
	}
	if i < 4 || i >= len(t) || t[i] != '-' {
		return 0, 0, 0, 0, ErrSyntax
	}
	var ok bool
	if m, ok = digits(t, i+1, 2); !ok || i+3 >= len(t) || t[i+3] != '-' {
		return 0, 0, 0, 0, ErrSyntax
	}
	if d, ok = digits(t, i+4, 2); !ok {
		return 0, 0, 0, 0, ErrSyntax
	}
	return y, m, d, i + 6, nil
}

// era applies a trailing " BC" at t[i:] and validates the date; it returns
// the astronomical year and the index after the suffix.
func era(t []byte, i int, y int64, m, d int) (int64, int, error) {
	if len(t)-i >= 3 && string(t[i:i+3]) == " BC" {
		if y == 0 {
			return 0, 0, ErrSyntax
		}
		y = 1 - y
		i += 3
	} else if y == 0 {
		return 0, 0, ErrSyntax
	}
	if m < 1 || m > 12 || d < 1 || d > daysIn(y, m) {
		return 0, 0, ErrSyntax
	}
	return y, i, nil
}

// parseDate reads date_out's ISO form ("2026-01-01", "0044-03-15 BC",
// "infinity", "-infinity") as days since the Unix epoch.
func parseDate(t []byte) (int64, error) {
	switch string(t) {
	case "infinity":
		return DateInfinity, nil
	case "-infinity":
		return DateNegInfinity, nil
	}
	y, m, d, i, err := parseYMD(t)
	if err != nil {
		return 0, err
	}
	if y, i, err = era(t, i, y, m, d); err != nil {
		return 0, err
	}
	if i != len(t) {
		return 0, ErrSyntax
	}
	days := daysFromCivil(y, m, d)
	if days < math.MinInt32 || days > math.MaxInt32 ||
		refuseSentinels && (days == DateInfinity || days == DateNegInfinity) {
		return 0, ErrOutOfRange
	}
	return days, nil
}

// refuseSentinels keeps finite timestamps and dates off the values that
// mean ±infinity. Tests switch it off once to show the rule is needed.
var refuseSentinels = true

const (
	maxSec = math.MaxInt64 / 1_000_000
	maxRem = math.MaxInt64 - maxSec*1_000_000 // MaxInt64's microseconds past maxSec
)

// Postgres timestamps run from 4714-11-24 BC to 294276-12-31
// 23:59:59.999999 (anything else is refused); int64 microseconds since 1970 from 290308 BC to
// 294247-01-10 04:00:54.775807 (MaxInt64, which also means 'infinity').
// The instants from MaxInt64 to Postgres' end are folded: MaxInt64 + k is
// carried as MinInt64 + 1 + k, in the range below 4714 BC that no Postgres
// instant takes (docs/adr/0038-timestamps-past-int64.md). foldEnd is the
// first k past Postgres' end (294277-01-01 00:00:00).
var (
	startSec = daysFromCivil(-4713, 11, 24) * 86400 // 4714-11-24 BC: below it, folded values
	endSec   = daysFromCivil(294277, 1, 1) * 86400
	foldEnd  = (endSec-maxSec)*1_000_000 - maxRem
)

// foldMicros carries us = MaxInt64 + k (0 <= k < foldEnd).
func foldMicros(k int64) int64 { return math.MinInt64 + 1 + k }

// unfoldedMicros splits a carried timestamp into its day number and the
// microseconds in that day; one past int64 (folded) is unfolded first.
func unfoldedMicros(us int64) (days, inDay int64) {
	if us > math.MinInt64 && us < math.MinInt64+1+foldEnd {
		days, inDay = splitMicros(math.MaxInt64)
		inDay += us - (math.MinInt64 + 1)
		return days + inDay/86_400_000_000, inDay % 86_400_000_000
	}
	return splitMicros(us)
}

// parseTimestamp reads timestamp_out/timestamptz_out's ISO form
// ("2026-01-01 12:34:56.5+05:30", " BC" suffix, "infinity", "-infinity")
// as microseconds since the Unix epoch (UTC for timestamptz, the wall time
// for timestamp). tz says whether an offset is required (timestamptz) or
// forbidden (timestamp).
func parseTimestamp(t []byte, tz bool) (int64, error) {
	switch string(t) {
	case "infinity":
		return TimestampInfinity, nil
	case "-infinity":
		return TimestampNegInfinity, nil
	}
	y, mo, d, i, err := parseYMD(t)
	if err != nil {
		return 0, err
	}
	if i >= len(t) || (t[i] != ' ' && t[i] != 'T') {
		return 0, ErrSyntax
	}
	h, ok1 := digits(t, i+1, 2)
	mi, ok2 := digits(t, i+4, 2)
	s, ok3 := digits(t, i+7, 2)
	if !ok1 || !ok2 || !ok3 || t[i+3] != ':' || t[i+6] != ':' || h > 23 || mi > 59 || s > 59 {
		return 0, ErrSyntax
	}
	i += 9
	var frac int64
	if i < len(t) && t[i] == '.' {
		i++
		n := 0
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			if n == 6 {
				return 0, ErrSyntax
			}
			frac = frac*10 + int64(t[i]-'0')
			i++
			n++
		}
		if n == 0 {
			return 0, ErrSyntax
		}
		for ; n < 6; n++ {
			frac *= 10
		}
	}
	var off int64
	if i < len(t) && (t[i] == '+' || t[i] == '-') {
		if !tz {
			return 0, ErrSyntax
		}
		sign := int64(1)
		if t[i] == '-' {
			sign = -1
		}
		oh, ok := digits(t, i+1, 2)
		if !ok {
			return 0, ErrSyntax
		}
		i += 3
		var om, os int
		if i < len(t) && t[i] == ':' {
			if om, ok = digits(t, i+1, 2); !ok || om > 59 {
				return 0, ErrSyntax
			}
			i += 3
			if i < len(t) && t[i] == ':' {
				if os, ok = digits(t, i+1, 2); !ok || os > 59 {
					return 0, ErrSyntax
				}
				i += 3
			}
		}
		off = sign * int64(oh*3600+om*60+os)
	} else if tz {
		return 0, ErrSyntax
	}
	if y, i, err = era(t, i, y, mo, d); err != nil {
		return 0, err
	}
	if i != len(t) {
		return 0, ErrSyntax
	}
	secs := daysFromCivil(y, mo, d)*86400 + int64(h*3600+mi*60+s) - off
	if secs >= endSec || secs < startSec {
		return 0, ErrOutOfRange
	}
	if secs >= maxSec {
		// At or past MaxInt64 (k >= 0): folded; at MaxInt64 itself too,
		// which would read as 'infinity' (refuseSentinels).
		if k := (secs-maxSec)*1_000_000 + frac - maxRem; k > 0 || k == 0 && refuseSentinels {
			return foldMicros(k), nil
		}
	}
	return secs*1_000_000 + frac, nil
}

// splitMicros splits microseconds since the epoch into a day number and the
// microseconds within that day.
func splitMicros(us int64) (days, inDay int64) {
	days = us / 86_400_000_000
	inDay = us % 86_400_000_000
	if inDay < 0 {
		inDay += 86_400_000_000
		days--
	}
	return days, inDay
}
