"""Fixed English text the tiny model's tokenizer is trained on.

The tokenizer of the tiny vision-language model (``abserve.arms.tiny_model``) must come out
byte-identical on every build, so it is trained on this constant text and nothing else. The
text is varied on purpose (narrative, technical, numbers, questions, punctuation) so that the
merges cover the words the load profiles' prompts use.
"""

from __future__ import annotations

CORPUS = """\
The morning light came slowly over the hills, and the small town woke to the sound of bells.
A baker opened the door of his shop and set out bread, rolls and cakes on the wooden table.
Children ran along the river with a red kite, laughing as the wind pulled it higher and higher.
An old woman sat on a bench near the fountain and fed the pigeons from a paper bag.
The market filled with people buying apples, pears, onions, carrots, fish, cheese and flowers.
A dog barked at a cat on the wall; the cat looked down, yawned, and went back to sleep.
Describe the picture in detail. What do you see in this image? How many objects are there?
Please describe each image briefly, then compare the first image with the last one.
The photo shows a blue car parked beside a green tree under a cloudy grey sky.
In the second picture a man in a yellow coat is walking across a bridge in the rain.
The third image contains a table with three cups, a teapot, a plate of cookies and a spoon.
Look at the chart: sales rose from 120 units in January to 340 units in June, then fell to 95.
The answer is 42. The total is 1,024 items, and the average is 3.75 per request.
Count the red squares, the blue circles and the green triangles in every frame of the video.
A server receives a request, schedules it, runs the model, and returns the generated tokens.
Latency is measured from the moment the request is sent until the last byte is received.
The time to first token, the time per output token and the throughput are reported per run.
When two servers give the same answer to the same question, the outputs are called identical.
If the outputs differ, the report names the request, the position and the first token that changed.
Engineers compare two versions of a program by sending the same traffic to both at once.
The experiment was repeated ten times; the median, the mean and the 95th percentile are shown.
Mountains, rivers, forests, deserts, oceans, islands, valleys, lakes, cliffs and beaches.
Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday; spring, summer, autumn, winter.
One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, hundred, thousand.
Red, orange, yellow, green, blue, indigo, violet, black, white, grey, brown, pink, purple.
She asked, "Where are you going?" He replied, "To the library, to return two books."
Why is the sky blue? Because air scatters blue light from the sun more than red light.
How does a bird fly? It pushes air down with its wings, and the air pushes the bird up.
The recipe needs two eggs, a cup of flour, half a cup of sugar, butter, milk and a pinch of salt.
Mix the dry ingredients first, add the eggs and milk, stir well, and bake for thirty minutes.
The train left the station at 7:45 and arrived in the city two hours and ten minutes later.
Passengers read newspapers, looked out of the windows, or slept with their heads on their bags.
A scientist recorded the temperature every hour: 18.5, 19.2, 21.0, 23.4, 24.1 and 22.8 degrees.
The results were surprising, so she checked the instruments and ran the test again.
Water boils at one hundred degrees at sea level and freezes at zero degrees.
The library has old maps, letters, photographs, paintings, and a large collection of books.
Every picture tells a story: a face, a street, a shadow, a window, a door, a hand, a smile.
The cat is sitting on the mat. The dog is lying under the table. The bird is singing in the tree.
There is a boat on the lake, two swans near the shore, and a fisherman with a long rod.
A child draws a house with a red roof, a yellow sun, a smoke cloud and a path to the gate.
The city at night is full of lights: cars, lamps, signs, windows and the moon above the towers.
Summarize the images above in one sentence, then list anything that appears in more than one.
First, read the question. Second, look at every image. Third, write a short and clear answer.
The storm broke the fence, knocked over the bins and scattered leaves across the whole garden.
In the morning the neighbours helped each other clean the street and repair the broken gate.
A good report is short, honest and complete; it shows the numbers and explains what they mean.
The quick brown fox jumps over the lazy dog, and the lazy dog does not seem to mind at all.
Stars, planets, comets and galaxies fill the night sky far beyond the clouds and the moon.
The farmer planted wheat in the north field, corn in the south field and beans near the barn.
Thank you for your help. You are welcome. Good morning. Good night. See you tomorrow.
"""
