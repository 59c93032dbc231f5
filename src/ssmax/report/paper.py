"""What the paper reports in each figure, in words, shown beside what a run measured.

Written from the paper's text (Secs. 2-3 and the figure captions); the numbers are the ones
the paper states. The report prints these next to the run's own numbers, in the same shape.
"""

from __future__ import annotations

PAPER = {
    "fig1": "Softmax's largest output falls towards 0 as n grows; SSMax (s = 0.43) keeps it "
    "near 1 (Sec. 2.2).",
    "fig2": "Learned p_n follows a log law: 0.0283 log n + 0.394 after 25,000 iterations at "
    "N = 1024 (Sec. 2.1).",
    "fig3": "Under Softmax the z_max needed to take the attention grows without bound with n; "
    "under SSMax about 1/s above the rest suffices for every n (Sec. 2.2).",
    "fig4": "Every SSMax variant trains to a lower loss than (a) throughout; (b) ends about "
    "0.008 lower; (d) is the lowest; (b) and (c) nearly coincide (Sec. 3.1).",
    "fig5": "Past the training length (theta x50) (a)'s loss rises sharply, and (a) is worse "
    "even at short context; (b) and (c) stay low up to about 10x; (d) lies between (a) and "
    "(b); (e) is higher at short context; (f) comes close to (b) (Sec. 3.2).",
    "fig6": "(a) retrieves only at short contexts; (b) retrieves up to about 10x the training "
    "length; (c) is clearly worse than (b); (d) is better than (a) but far below (b); (e) "
    "beats (a) but not (b); (f) slightly beats (e) (Sec. 3.3).",
    "fig7": "At context 8000 with the needle at 50%, (b) has the highest needle scores of all "
    "models; (a)'s best heads stay close to 0 (Sec. 3.4).",
    "fig8": "Over 100 trials at context 8000, (b)'s top needle scores are the highest, and high "
    "scores go with correct answers; (c) is below (b); (d) is above (a) but well below (b); "
    "(e) and (f) are above (a) and below (b), (f) above (e) (Sec. 3.4).",
}
