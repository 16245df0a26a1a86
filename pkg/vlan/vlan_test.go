package vlan

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		n       int
		bad     bool
	}{
		{"", "", 0, false},
		{"100", "100", 1, false},
		{"100-199,300", "100-199,300", 101, false},
		{" 300 , 100-102,101 ", "100-102,300", 4, false},
		{"1-4094", "1-4094", 4094, false},
		{"0", "", 0, true},
		{"4095", "", 0, true},
		{"300-200", "", 0, true},
		{"1,,2", "", 0, true},
		{"a-b", "", 0, true},
		{"-5", "", 0, true},
		{"5-", "", 0, true},
		{"+100", "", 0, true},
		{"100-+200", "", 0, true},
	} {
		s, err := Parse(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("Parse(%q) err = %v", tc.in, err)
			continue
		}
		if tc.bad {
			continue
		}
		if s.String() != tc.out || len(s) != tc.n {
			t.Errorf("Parse(%q) = %q (%d), want %q (%d)", tc.in, s, len(s), tc.out, tc.n)
		}
	}
}

func TestContainsMissing(t *testing.T) {
	s, _ := Parse("100-199,300")
	if !s.Contains(100) || !s.Contains(199) || s.Contains(200) || !s.Contains(300) || s.Contains(1) {
		t.Error("Contains wrong")
	}
	o, _ := Parse("150,250,300,301")
	if got := s.Missing(o).String(); got != "250,301" {
		t.Errorf("Missing = %q", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("100-199,300")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			return
		}
		again, err := Parse(s.String())
		if err != nil || again.String() != s.String() {
			t.Fatalf("Parse(String(Parse(%q))) = %q, %v", in, again, err)
		}
		for i, id := range s {
			if id < MinID || id > MaxID || i > 0 && s[i-1] >= id {
				t.Fatalf("Parse(%q) = %v: out of range or unsorted", in, s)
			}
		}
	})
}
