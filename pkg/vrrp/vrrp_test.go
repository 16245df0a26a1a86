package vrrp

import (
	"strings"
	"testing"
)

func TestParseIDs(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		n       int
		bad     string
	}{
		{"", "", 0, ""},
		{"7", "7", 1, ""},
		{"1-20,30", "1-20,30", 21, ""},
		{" 30 , 1-3,2 ", "1-3,30", 4, ""},
		{"1-255", "1-255", 255, ""},
		{"0", "", 0, "out of range"},
		{"256", "", 0, "out of range"},
		{"20-10", "", 0, "reversed"},
		{"1,,2", "", 0, "empty item in VRID list"},
		{"+7", "", 0, "not a VRID"},
		{"a", "", 0, "not a VRID"},
	} {
		s, err := ParseIDs(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("ParseIDs(%q) err = %v, want %q", tc.in, err, tc.bad)
			}
			continue
		}
		if err != nil || s.String() != tc.out || len(s) != tc.n {
			t.Errorf("ParseIDs(%q) = %q (%d) %v, want %q (%d)", tc.in, s, len(s), err, tc.out, tc.n)
		}
	}
	if s, _ := ParseIDs("1-20"); !s.Contains(7) || s.Contains(21) {
		t.Errorf("Contains of %s wrong", s)
	}
}

func TestMAC(t *testing.T) {
	if got := MAC(7, false).String(); got != "00:00:5e:00:01:07" {
		t.Errorf("IPv4 MAC of VRID 7 = %s", got)
	}
	if got := MAC(255, true).String(); got != "00:00:5e:00:02:ff" {
		t.Errorf("IPv6 MAC of VRID 255 = %s", got)
	}
}

func TestParseGroups(t *testing.T) {
	gs, err := ParseGroups(" 7=192.0.2.100, 2001:db8::100 ;8=192.0.2.101", 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0].String() != "7=192.0.2.100,2001:db8::100" || gs[1].String() != "8=192.0.2.101" {
		t.Fatalf("groups %v", gs)
	}
	macs := gs[0].MACs()
	if len(macs) != 2 || macs[0].String() != "00:00:5e:00:01:07" || macs[1].String() != "00:00:5e:00:02:07" {
		t.Errorf("MACs of %s: %v", gs[0], macs)
	}
	if macs := gs[1].MACs(); len(macs) != 1 || macs[0].String() != "00:00:5e:00:01:08" {
		t.Errorf("MACs of %s: %v", gs[1], macs)
	}
	for _, tc := range []struct{ in, bad string }{
		{"", "not VRID=VIP"},
		{"7", "not VRID=VIP"},
		{"0=192.0.2.1", "out of range"},
		{"7=", "not a unicast address"},
		{"7=192.0.2.0/24", "not a unicast address"},
		{"7=fe80::1", "not a unicast address"},
		{"7=224.0.0.18", "not a unicast address"},
		{"7=192.0.2.1;7=192.0.2.2", "VRID 7 appears twice"},
		{"7=192.0.2.1;8=192.0.2.1", "VIP 192.0.2.1 appears twice"},
		{"7=192.0.2.1,192.0.2.2,192.0.2.3", "more than 2 VIPs"},
	} {
		if _, err := ParseGroups(tc.in, 2); err == nil || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("ParseGroups(%q) err = %v, want %q", tc.in, err, tc.bad)
		}
	}
}
